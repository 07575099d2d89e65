#!/usr/bin/env bash
# The live progress bar: on a terminal (a pseudo-terminal from script(1))
# cdl-train draws it with an ETA for the epoch and the run; into a file or a
# pipe (a Slurm log) it writes no bar and no carriage return, only the plain
# epoch lines.
. "${top_srcdir:-.}/tests/e2e/common.sh"
args="--dataset synthetic --synthetic-size 512 --batch-size 32 --epochs 2 --threads 1 --workers 0"

# shellcheck disable=SC2086
"$CDL_TRAIN" $args >"$TMP/out" 2>"$TMP/err" || die "training failed"
grep -q '^epoch 2/2 ' "$TMP/out" || die "no plain epoch lines in the log"
grep -q 'ETA' "$TMP/out" "$TMP/err" && die "the bar went into a log file"
grep -q $'\r' "$TMP/out" "$TMP/err" && die "carriage returns in a log file"

command -v script >/dev/null || { echo "SKIP: no script(1) for a terminal (util-linux)"; exit 77; }
# script runs the command line with $SHELL -c and records the terminal.
SHELL=/bin/sh script -qec "'$CDL_TRAIN' $args" "$TMP/tty" >/dev/null 2>&1 ||
    { cat "$TMP/tty"; die "training on a terminal failed"; }
grep -aq 'epoch 1/2 \[#*\.*\] [0-9]*/[0-9]* .* img/s  ETA [0-9?][0-9:]* (run [0-9?][0-9:]*)' "$TMP/tty" ||
    { cat -v "$TMP/tty" | head -5; die "no bar with an ETA on the terminal"; }
grep -aq 'epoch 2/2 \[##############################\] \([0-9]*\)/\1 .*ETA 0:00 (run 0:00)' "$TMP/tty" ||
    { cat -v "$TMP/tty" | head -5; die "the last batch's bar does not end at ETA 0:00"; }

# --max-steps ends the run inside the first of many epochs: the run's ETA
# counts the steps to it, not the 1000 epochs (it said hours).
SHELL=/bin/sh script -qec "'$CDL_TRAIN' $args --epochs 1000 --max-steps 5" "$TMP/tty" \
    >/dev/null 2>&1 || { cat "$TMP/tty"; die "training with --max-steps on a terminal failed"; }
grep -aq 'epoch 1/1000 \[#*\.*\] 5/15 .*ETA 0:00 (run 0:00)' "$TMP/tty" ||
    { cat -v "$TMP/tty" | tr '\r' '\n' | grep ETA | tail -3; die "the ETA at --max-steps is not 0:00"; }

# A language model's bar counts tokens per second, as its epoch line does
# (it said "img/s" of its windows).
for i in $(seq 200); do echo "line $i of a small corpus for the bar"; done >"$TMP/c.txt"
SHELL=/bin/sh script -qec "'$CDL_TRAIN' --threads 1 --workers 0 --max-steps 3 --batch-size 4 \
    --model gpt:n_layer=1,n_head=2,n_embd=16,block_size=16 --dataset text:$TMP/c.txt" \
    "$TMP/tty" >/dev/null 2>&1 || { cat "$TMP/tty"; die "training a GPT on a terminal failed"; }
grep -aq 'epoch 1/[0-9]* \[#*\.*\] 3/[0-9]* .* [0-9]* tok/s  ETA' "$TMP/tty" ||
    { cat -v "$TMP/tty" | tr '\r' '\n' | grep ETA | tail -3; die "no tok/s on a GPT's bar"; }
grep -aq 'img/s' "$TMP/tty" && die "a GPT's bar counts images"
echo "PASS: progress bar with ETA on a terminal only"
