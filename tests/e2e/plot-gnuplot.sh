#!/usr/bin/env bash
# How cdl-plot runs gnuplot: gnuplot opens no file in the output's folder
# (it draws to its standard output, which cdl-plot writes into place with
# the atomic writer), so a link planted at the name gnuplot used to draw
# into (PREFIX.EXT.tmpPID) is not followed; the charts are the bytes
# gnuplot draws into a file; its argv is fixed and no file name reaches its
# script; a gnuplot that fails, cannot run or draws no whole chart is an
# error naming the chart and gnuplot, with its messages, and leaves the
# earlier charts as they were and no file behind; so is one that hangs
# (--timeout). Skips without gnuplot.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PLOT="$top_builddir/cli/cdl-plot"

REAL=$(command -v gnuplot) || { echo "SKIP: gnuplot is not installed (Debian: gnuplot-nox)"; exit 77; }
cat >"$TMP/m.jsonl" <<'J'
{"type":"epoch","epoch":1,"step":10,"train_loss":2.0,"train_acc":0.2,"val_loss":2.1,"val_acc":0.25,"lr":0.1}
{"type":"epoch","epoch":2,"step":20,"train_loss":1.5,"train_acc":0.4,"val_loss":1.8,"val_acc":0.6,"lr":0.05}
J
whole_png() { tail -c 12 "$1" | od -An -c | tr -d ' \n' | grep -q IEND; }
whole_svg() { grep -q '</svg>' "$1"; }

# Links planted at the temporary names of the old cdl-plot (its pid is the
# subshell's, which execs it) and at the chart itself: gnuplot used to
# follow the first and overwrite the file it points to.
mkdir "$TMP/o"
printf 'precious\n' >"$TMP/victim"
printf 'target\n' >"$TMP/target"
ln -s "$TMP/target" "$TMP/o/p.svg"
(
    ln -s "$TMP/victim" "$TMP/o/p.png.tmp$BASHPID"
    ln -s "$TMP/victim" "$TMP/o/p.svg.tmp$BASHPID"
    exec "$PLOT" -o "$TMP/o/p" "$TMP/m.jsonl"
) >"$TMP/stdout" 2>"$TMP/err"
st=$?
[ "$(cat "$TMP/victim")" = precious ] || die "a link at the old temporary name was followed"
[ "$(cat "$TMP/target")" = target ] || die "a link at the chart's name was followed"
[ $st = 0 ] || { cat "$TMP/err"; die "cdl-plot beside planted links failed"; }
[ -f "$TMP/o/p.svg" ] && [ ! -L "$TMP/o/p.svg" ] && whole_svg "$TMP/o/p.svg" ||
    die "p.svg is not a whole SVG in place of the link"
whole_png "$TMP/o/p.png" || die "p.png is not a whole PNG"
[ "$(find "$TMP/o" -name 'p.*.tmp*' -type l | wc -l)" = 2 ] ||
    die "the planted links were touched: $(ls -A "$TMP/o")"
[ "$(ls -A "$TMP/o" | grep -vc '^p\.\(png\|svg\)\(\.tmp[0-9]*\)\?$')" = 0 ] ||
    die "files left behind: $(ls -A "$TMP/o")"

# What gnuplot gets and draws, through a wrapper that keeps its argv and
# script: the charts are byte for byte what the same script draws into a
# file, for both terminals, and no name of ours is in the script.
mkdir "$TMP/wrap" "$TMP/log" "$TMP/same"
cat >"$TMP/wrap/gnuplot" <<EOF
#!/bin/sh
printf '%s\n' "\$@" >"$TMP/log/argv.\$\$"
cat >"$TMP/log/script.\$\$"
echo 'a note from gnuplot' >&2
exec "$REAL" "\$@" <"$TMP/log/script.\$\$"
EOF
chmod +x "$TMP/wrap/gnuplot"
PATH="$TMP/wrap:$PATH" "$PLOT" -o "$TMP/same/p" --width 640 --height 480 "$TMP/m.jsonl" \
    >"$TMP/stdout" 2>"$TMP/err" || { cat "$TMP/err"; die "cdl-plot through the wrapper failed"; }
expect_err "cdl-plot: $TMP/same/p.png: gnuplot ($TMP/wrap/gnuplot) said:"
expect_err "  gnuplot: a note from gnuplot"
[ "$(ls "$TMP/log" | grep -c '^script')" = 2 ] || die "not one gnuplot per chart: $(ls "$TMP/log")"
for a in "$TMP"/log/argv.*; do
    [ "$(cat "$a")" = "-d" ] || die "gnuplot's argv: $(cat "$a")"
done
for s in "$TMP"/log/script.*; do
    grep -qF "$TMP" "$s" && die "a path reached gnuplot's script: $(grep -F "$TMP" "$s")"
    if grep -q '^set terminal pngcairo' "$s"; then ext=png; else ext=svg; fi
    grep -qx 'set output' "$s" || die "the $ext script does not draw to standard output"
    awk -v f="$TMP/file.$ext" '!done && $0 == "set output" { print "set output \047" f "\047"; done = 1; next } 1' \
        "$s" | "$REAL" -d || die "gnuplot on the $ext script into a file failed"
    cmp "$TMP/file.$ext" "$TMP/same/p.$ext" || die "p.$ext differs from gnuplot's own file"
done

# gnuplot fails: its status and messages, named with the chart; the
# earlier chart is unchanged and nothing is left.
mkdir "$TMP/fail" "$TMP/f"
printf 'earlier\n' >"$TMP/f/p.png"
cat >"$TMP/fail/gnuplot" <<'EOF'
#!/bin/sh
cat >/dev/null
echo '"-" line 3: unknown or ambiguous terminal type' >&2
exit 3
EOF
chmod +x "$TMP/fail/gnuplot"
PATH="$TMP/fail:$PATH" expect_status 1 "$PLOT" -o "$TMP/f/p" "$TMP/m.jsonl"
expect_err "cdl-plot: $TMP/f/p.png: gnuplot ($TMP/fail/gnuplot) failed (exit status 3); nothing was written, any earlier $TMP/f/p.png is unchanged"
expect_err '  gnuplot: "-" line 3: unknown or ambiguous terminal type'
[ "$(cat "$TMP/f/p.png")" = earlier ] || die "a failed gnuplot changed the earlier chart"
[ "$(ls -A "$TMP/f")" = p.png ] || die "files left behind: $(ls -A "$TMP/f")"

# gnuplot exits 0 with half a PNG: not renamed into place.
cat >"$TMP/fail/gnuplot" <<'EOF'
#!/bin/sh
cat >/dev/null
printf '\211PNG\r\n\032\nhalf'
EOF
PATH="$TMP/fail:$PATH" expect_status 1 "$PLOT" -o "$TMP/f/p" --format png "$TMP/m.jsonl"
expect_err "cdl-plot: $TMP/f/p.png: gnuplot ($TMP/fail/gnuplot) exited 0 but drew no whole PNG (12 bytes)"
[ "$(cat "$TMP/f/p.png")" = earlier ] || die "half a PNG replaced the earlier chart"
[ "$(ls -A "$TMP/f")" = p.png ] || die "files left behind: $(ls -A "$TMP/f")"

# The PNG drawn, then gnuplot fails on the SVG: the PNG is said written.
cat >"$TMP/fail/gnuplot" <<EOF
#!/bin/sh
cat >"$TMP/fail/script"
grep -q '^set terminal svg' "$TMP/fail/script" && exit 4
exec "$REAL" "\$@" <"$TMP/fail/script"
EOF
mkdir "$TMP/half"
PATH="$TMP/fail:$PATH" expect_status 1 "$PLOT" -o "$TMP/half/p" "$TMP/m.jsonl"
expect_err "cdl-plot: wrote $TMP/half/p.png"
expect_err "cdl-plot: $TMP/half/p.svg: gnuplot ($TMP/fail/gnuplot) failed (exit status 4)"
whole_png "$TMP/half/p.png" || die "the PNG drawn before a failed SVG is not in place"
[ "$(ls -A "$TMP/half")" = p.png ] || die "files left behind: $(ls -A "$TMP/half")"

# A gnuplot that cannot be executed at all.
printf 'not a program\n' >"$TMP/fail/gnuplot"
PATH="$TMP/fail:$PATH" expect_status 1 "$PLOT" -o "$TMP/f/p" --format svg "$TMP/m.jsonl"
expect_err "cdl-plot: $TMP/f/p.svg: cannot run gnuplot ($TMP/fail/gnuplot): Exec format error"
[ "$(ls -A "$TMP/f")" = p.png ] || die "files left behind: $(ls -A "$TMP/f")"
# A gnuplot that hangs is stopped at --timeout, said, and leaves nothing.
printf '#!/bin/sh\ncat >/dev/null\necho drawing >&2\nexec sleep 1000\n' >"$TMP/fail/gnuplot"
PATH="$TMP/fail:$PATH" expect_status 1 "$PLOT" -o "$TMP/f/p" --timeout 0.5 "$TMP/m.jsonl"
expect_err "cdl-plot: $TMP/f/p.png: gnuplot ($TMP/fail/gnuplot) took longer than 0.5 s and was stopped; nothing was written, any earlier $TMP/f/p.png is unchanged; give it more time with --timeout"
[ "$(cat "$TMP/f/p.png")" = earlier ] || die "a stopped gnuplot changed the earlier chart"
[ "$(ls -A "$TMP/f")" = p.png ] || die "files left behind: $(ls -A "$TMP/f")"
expect_status 2 "$PLOT" --timeout 0 "$TMP/m.jsonl"
expect_err "cdl-plot: --timeout '0': expected seconds from 0.1 to 86400"
echo "PASS: plot-gnuplot"
