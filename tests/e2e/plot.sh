#!/usr/bin/env bash
# cdl-plot: two short cdl-train runs (a small sweep) drawn into one PNG and
# one SVG of the size asked for (the PNG's signature and IHDR chunk are
# checked, not only that a file exists); the text summary alone when
# gnuplot is not in PATH; resumed runs and bad lines read as documented;
# nothing from a file or option reaches gnuplot but as a quoted string;
# an output folder every account may write to without the sticky bit is
# refused, as a checkpoint's is.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PLOT="$top_builddir/cli/cdl-plot"

# png_size FILE: "WIDTH HEIGHT" from a valid PNG's IHDR, else nothing.
png_size() {
    [ "$(od -An -tx1 -N8 "$1" | tr -d ' \n')" = 89504e470d0a1a0a ] || return 1
    [ "$(od -An -c -j12 -N4 "$1" | tr -d ' \n')" = IHDR ] || return 1
    od -An -tu1 -j16 -N8 "$1" |
        awk '{ printf "%d %d\n", (($1 * 256 + $2) * 256 + $3) * 256 + $4, (($5 * 256 + $6) * 256 + $7) * 256 + $8 }'
}
# The check can fail: a file that is no PNG has no size.
printf 'not a png at all, not at all' >"$TMP/bad.png"
png_size "$TMP/bad.png" && die "png_size accepts a file that is no PNG"

for lr in 0.05 0.01; do
    mkdir -p "$TMP/sweep/lr-$lr"
    "$CDL_TRAIN" --dataset synthetic --synthetic-size 256 --batch-size 64 --epochs 3 --lr $lr \
        --threads 1 --workers 0 --metrics "$TMP/sweep/lr-$lr/metrics.jsonl" -q ||
        die "training lr $lr failed"
done
# An old-style line (no type), a resumed run's repeated epoch and a broken
# line: read, replaced and skipped.
cat >"$TMP/old.jsonl" <<'J'
{"epoch":1,"step":10,"train_loss":2.0,"train_acc":0.2,"val_loss":2.1,"val_acc":0.25,"images_per_sec":1,"seconds":1,"lr":0.1}
{"type":"epoch","epoch":2,"step":15,"train_loss":1.9,"train_acc":0.3,"val_loss":2.0,"val_acc":0.5,"lr":0.05}
{"type":"epoch","epoch":2,"step":20,"train_loss":1.5,"train_acc":0.4,"val_loss":1.8,"val_acc":0.6,"lr":0.05}
{"type":"epoch","epoch":3,"step":30,"train_loss
J
"$PLOT" --summary "$TMP/old.jsonl" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err"; die "cdl-plot --summary failed"; }
grep -q '^old: 2 epochs to step 20; best val_acc 0.6000 at epoch 2' "$TMP/out" ||
    { cat "$TMP/out"; die "summary of old.jsonl"; }
expect_err "skipped 1 line"
# The summary into a full disk (/dev/full): an error, not exit 0.
"$PLOT" --summary "$TMP/old.jsonl" >/dev/full 2>"$TMP/err" && die "a lost summary exited 0"
expect_err "writing the summary to standard output failed: No space left on device"

# A language model's run: step and eval records (a resumed run repeats
# step 4: the last record wins), drawn against the optimizer step; the
# lowest validation loss is sought over evaluations and epoch ends.
cat >"$TMP/lm.jsonl" <<'J'
{"type":"config","run_id":"ab","rank":0,"config":{"eval_every":2}}
{"type":"step","run_id":"ab","rank":0,"epoch":1,"step":2,"loss":5.0,"acc":0.1,"lr":0.001}
{"type":"eval","run_id":"ab","rank":0,"epoch":1,"step":2,"val_loss":4.0,"val_acc":0.2}
{"type":"step","run_id":"ab","rank":0,"epoch":1,"step":4,"loss":9.0,"acc":0.1,"lr":0.001}
{"type":"step","run_id":"ab","rank":0,"epoch":1,"step":4,"loss":3.0,"acc":0.3,"lr":0.0005}
{"type":"eval","run_id":"ab","rank":0,"epoch":1,"step":4,"val_loss":2.5,"val_acc":0.4}
{"type":"epoch","run_id":"ab","rank":0,"epoch":1,"step":5,"train_loss":3.5,"train_acc":0.3,"val_loss":2.75,"val_acc":0.35,"lr":0.0002}
{"type":"step","run_id":"ab","rank":0,"epoch":2,"step":6,"loss":2.0,"acc":0.5,"lr":0.0001}
J
"$PLOT" --summary "$TMP/lm.jsonl" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err"; die "cdl-plot --summary lm"; }
grep -qx '  last step 6: loss 2.0000 acc 0.5000 lr 0.0001' "$TMP/out" &&
    grep -qx '  3 validations to step 5 (--eval-every and epoch ends); lowest val_loss 2.5000 at step 4 (val_acc 0.4000)' \
        "$TMP/out" || { cat "$TMP/out"; die "summary of a run with step and eval records"; }
# A run that is still in its first epoch has step records only.
head -2 "$TMP/lm.jsonl" >"$TMP/live.jsonl"
"$PLOT" --summary "$TMP/live.jsonl" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err"; die "a live run"; }
grep -q '^live (run ab): no epoch ended$' "$TMP/out" || { cat "$TMP/out"; die "summary of a live run"; }

if command -v gnuplot >/dev/null; then
    "$PLOT" -o "$TMP/lm" --format svg "$TMP/lm.jsonl" "$TMP/old.jsonl" >"$TMP/out" 2>"$TMP/err" ||
        { cat "$TMP/out" "$TMP/err"; die "cdl-plot of step records failed"; }
    grep -q '>optimizer step<' "$TMP/lm.svg" || die "step records are not drawn against the step"
    for line in "lm train" "lm val" "old train" "old val"; do
        grep -q ">$line<" "$TMP/lm.svg" || die "the step chart has no line '$line'"
    done
    "$PLOT" -o "$TMP/live" --format svg "$TMP/live.jsonl" >"$TMP/out" 2>"$TMP/err" ||
        { cat "$TMP/out" "$TMP/err"; die "cdl-plot of a live run failed"; }
    grep -q '>live train<' "$TMP/live.svg" && ! grep -q '>live val<' "$TMP/live.svg" ||
        die "a live run without validations: its training line only"
    # Evaluations alone leave the learning-rate panel empty: said in it.
    sed -n 3p "$TMP/lm.jsonl" >"$TMP/evals.jsonl"
    "$PLOT" -o "$TMP/evals" --format svg "$TMP/evals.jsonl" >"$TMP/out" 2>"$TMP/err" ||
        { cat "$TMP/out" "$TMP/err"; die "cdl-plot of evaluations alone failed"; }
    grep -q '>no records<' "$TMP/evals.svg" || die "an empty panel is not said"
    "$PLOT" -o "$TMP/sweep/plot" --width 800 --height 600 "$TMP"/sweep/lr-*/metrics.jsonl \
        >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/out" "$TMP/err"; die "cdl-plot failed"; }
    size=$(png_size "$TMP/sweep/plot.png") || die "$TMP/sweep/plot.png is not a PNG"
    [ "$size" = "800 600" ] || die "plot.png is $size, expected 800 600"
    grep -q '<svg' "$TMP/sweep/plot.svg" && grep -q 'width="800"' "$TMP/sweep/plot.svg" ||
        die "plot.svg is no SVG 800 wide"
    for run in lr-0.05 lr-0.01; do
        grep -q ">$run train<" "$TMP/sweep/plot.svg" || die "the chart has no line labelled $run"
        grep -q "^$run (run [0-9a-f]\{8\}): 3 epochs" "$TMP/out" || die "no summary of $run"
    done
    # A label with quotes and a title with gnuplot syntax stay text.
    mkdir -p "$TMP/it's\"\`x"
    cp "$TMP/sweep/lr-0.05/metrics.jsonl" "$TMP/it's\"\`x/"
    "$PLOT" -o "$TMP/q" --format png --title "'; system('touch $TMP/pwned'); '" \
        "$TMP/it's\"\`x/metrics.jsonl" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err"; die "quoted label"; }
    [ ! -e "$TMP/pwned" ] || die "a --title ran a command in gnuplot"
    png_size "$TMP/q.png" >/dev/null || die "q.png"
    [ ! -e "$TMP/q.svg" ] || die "--format png wrote an SVG"
    expect_status 2 "$PLOT" -o '|touch x' "$TMP/old.jsonl"
    expect_err "not starting with '|'"
    # An output folder every account may write to without the sticky bit:
    # any of them could swap a chart between its check and its rename
    # (cdl-plot renamed by path there). Refused before drawing, as a
    # checkpoint's folder is; sticky (as /tmp), drawn.
    mkdir "$TMP/open" && chmod 0777 "$TMP/open"
    expect_status 1 "$PLOT" -o "$TMP/open/p" --format svg "$TMP/old.jsonl"
    expect_err "cdl-plot: $TMP/open/p.svg: its directory $TMP/open may be written by every account and is not sticky (mode 0777)"
    expect_err "chmod o-w $TMP/open"
    [ -z "$(ls -A "$TMP/open")" ] || die "files were written there: $(ls -A "$TMP/open")"
    chmod 1777 "$TMP/open"
    expect_status 0 "$PLOT" -o "$TMP/open/p" --format svg "$TMP/old.jsonl"
    grep -q '</svg>' "$TMP/open/p.svg" || die "no chart in a sticky folder"
    [ "$(ls -A "$TMP/open")" = p.svg ] || die "files left: $(ls -A "$TMP/open")"
else
    echo "note: gnuplot is not installed (Debian: gnuplot-nox): charts not checked"
fi

# No gnuplot in PATH: the summary, exit 0, no image.
mkdir "$TMP/empty"
PATH="$TMP/empty" "$PLOT" -o "$TMP/none" "$TMP/sweep/lr-0.01/metrics.jsonl" >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/err"; die "cdl-plot without gnuplot failed"; }
grep -q 'best val_acc .* at epoch [1-3]' "$TMP/out" || die "no summary without gnuplot"
grep -q 'final epoch 3:' "$TMP/out" || die "no final values without gnuplot"
expect_err "gnuplot is not in PATH"
[ ! -e "$TMP/none.png" ] || die "an image without gnuplot?"
expect_status 1 "$PLOT" "$TMP/empty/missing.jsonl"
expect_err "cannot open"
expect_status 2 "$PLOT" --width 5 "$TMP/old.jsonl"
echo "PASS: cdl-plot"
