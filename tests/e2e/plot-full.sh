#!/usr/bin/env bash
# cdl-plot onto a full disk: gnuplot exits 0 with a truncated PNG or SVG, so
# cdl-plot draws into temporary files, renames each only when it ends as a
# whole PNG (IEND) or SVG (</svg>), and otherwise says so and exits 1,
# leaving earlier charts as they were and no temporary file. Needs root
# (a small tmpfs, removed at the end) and gnuplot; skips otherwise.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PLOT="$top_builddir/cli/cdl-plot"

command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
mkdir "$TMP/disk"
mount -t tmpfs -o size=256k tmpfs "$TMP/disk" 2>/dev/null ||
    { echo "SKIP: cannot mount a tmpfs"; exit 77; }
trap 'umount "$TMP/disk" 2>/dev/null; rm -rf "$TMP"' EXIT

expect_status 0 "$CDL_TRAIN" --model mlp --dataset synthetic --synthetic-size 64 --batch-size 16 \
    --epochs 2 --val-split 16 --threads 1 --workers 0 --quiet --metrics "$TMP/m.jsonl"
printf 'earlier chart\n' >"$TMP/disk/plot.svg"
# Leave 8 KB free: less than either chart needs.
head -c $((248 * 1024 - 4096)) /dev/zero >"$TMP/disk/fill" 2>/dev/null
expect_status 1 "$PLOT" -o "$TMP/disk/plot" "$TMP/m.jsonl"
expect_err "cdl-plot: $TMP/disk/plot.png came out incomplete"
expect_err "Free space there or give -o another place"
[ "$(cat "$TMP/disk/plot.svg")" = "earlier chart" ] || die "the earlier plot.svg was changed"
[ ! -e "$TMP/disk/plot.png" ] || die "an incomplete plot.png was left"
ls -A "$TMP/disk" | grep -q tmp && die "temporary files left: $(ls -A "$TMP/disk")"

rm "$TMP/disk/fill"
expect_status 0 "$PLOT" -o "$TMP/disk/plot" "$TMP/m.jsonl"
tail -c 12 "$TMP/disk/plot.png" | grep -q IEND || die "plot.png is not a whole PNG"
grep -q '</svg>' "$TMP/disk/plot.svg" || die "plot.svg is not a whole SVG"
echo "PASS: plot-full"
