#!/usr/bin/env bash
# The settings templates/README.md says the templates read from the
# environment (CDL_TRAIN, DATA_DIR, RUN_DIR, EPOCHS, MAX_STEPS for those
# that run cdl-train) are read by each of them, or refused: a setting a
# template ignores trains on its defaults without a word. lm-gpt.sbatch
# ignored DATA_DIR (its corpus is DATA=KIND:PATH) and trained on Debian's
# fortunes instead of the user's data; it now stops, naming DATA.
. "${top_srcdir:-.}/tests/e2e/common.sh"

T="$top_srcdir/templates"
grep -qF '(`CDL_TRAIN`, `DATA_DIR`' "$T/README.md" ||
    die "templates/README.md no longer lists the settings this test checks: update it"
n=0
for t in "$T"/*.sbatch; do
    grep -q 'CDL_TRAIN' "$t" || continue   # the PyTorch templates run python
    for v in CDL_TRAIN DATA_DIR RUN_DIR EPOCHS MAX_STEPS; do
        grep -qE "\\$\\{$v(:?-|:?\\?|\\})" "$t" ||
            die "$(basename "$t") does not read $v, which templates/README.md says the templates take"
    done
    n=$((n + 1))
done
[ "$n" -ge 8 ] || die "only $n cdl-train templates found: the check is blind"

# lm-gpt.sbatch run as a plain script (no Slurm): DATA_DIR stops it before
# anything else, naming the setting it takes.
expect_status 1 env DATA_DIR=/data/owt bash "$T/lm-gpt.sbatch"
expect_err "DATA_DIR=/data/owt is not read by this template: give the corpus as DATA=text:FILE or DATA=tokens:DIR"
echo "PASS: the $n cdl-train templates read or refuse every setting templates/README.md names"
