#!/usr/bin/env bash
# The Debian text corpus of cdl's language-model tests and benchmarks: the
# fortune cookies of Debian's fortunes-min package (installed by
# scripts/install-deps.sh), concatenated in a fixed order, verbatim (98,399
# bytes in fortunes-min 1:1.99.1: fortunes, literature, riddles; quotes
# separated by lines holding "%").
# Usage: scripts/fortunes-corpus.sh [OUT]   (default: standard output)
# Then: cdl-train --dataset text:OUT ...   (docs/data.md, "Token data")
set -euo pipefail

dir=${CDL_FORTUNES_DIR:-/usr/share/games/fortunes}
files=(fortunes literature riddles)
for f in "${files[@]}"; do
    if [ ! -f "$dir/$f" ]; then
        echo "fortunes-corpus: $dir/$f is missing: apt-get install fortunes-min" \
             "(or set CDL_FORTUNES_DIR)" >&2
        exit 1
    fi
done
if [ $# -ge 1 ]; then
    # Written next to OUT and renamed: a reader never sees half a corpus.
    tmp=$(mktemp "$1.XXXXXX")
    trap 'rm -f "$tmp"' EXIT
    (cd "$dir" && cat "${files[@]}") >"$tmp"
    chmod 644 "$tmp"
    mv -f "$tmp" "$1"
    trap - EXIT
else
    cd "$dir" && cat "${files[@]}"
fi
