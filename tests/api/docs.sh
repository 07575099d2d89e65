#!/usr/bin/env bash
# Every complete C program in the documentation (a ```c block of README.md
# or docs/*.md with a main function) compiles against the public headers
# with -std=c11 -Wall -Wextra -Wpedantic -Werror, links the shared libcdl
# alone, and runs to exit status 0 in a directory of its own (its first
# argument), so the examples a C programmer copies cannot fall behind the
# library.
. "${top_srcdir:-.}/tests/e2e/common.sh"

LIBDIR=$(cd "$top_builddir" && pwd)/.libs
[ -f "$LIBDIR/libcdl.so" ] || { echo "SKIP: no shared libcdl (configured with --disable-shared)"; exit 77; }
CC=${CC:-cc}
command -v "$CC" >/dev/null || { echo "SKIP: no C compiler ($CC)"; exit 77; }

# extract FILE: its ```c blocks as $TMP/NAME-K.c, K from 1.
extract() {
    awk -v out="$TMP/$(basename "$1" .md)-" '
        /^```c[[:space:]]*$/ { k++; f = out k ".c"; printf "" > f; next }
        /^```/ { f = ""; next }
        f != "" { print >> f }' "$1"
}
for doc in "$top_srcdir"/README.md "$top_srcdir"/docs/*.md; do
    extract "$doc"
done
progs=$(grep -l -E '^int main\(' "$TMP"/*.c 2>/dev/null)
[ -n "$progs" ] || die "no C program found in the docs: the check is blind (docs/api.md has three)"
grep -q 'cdl_train_run' $progs || die "docs/api.md's programs were not extracted"

n=0
for src in $progs; do
    name=$(basename "$src" .c)
    "$CC" -std=c11 -Wall -Wextra -Wpedantic -Werror -I"$top_srcdir/lib" "$src" \
        -L"$LIBDIR" -Wl,-rpath,"$LIBDIR" -lcdl -o "$TMP/$name" 2>"$TMP/err" ||
        { cat "$TMP/err" >&2; die "the C program $name of the docs does not compile: $(head -3 "$src" | tr '\n' ' ')"; }
    mkdir "$TMP/$name.d"
    rc=0
    "$TMP/$name" "$TMP/$name.d" >"$TMP/$name.out" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || { cat "$TMP/$name.out" >&2; die "the C program $name of the docs exits $rc"; }
    n=$((n + 1))
done
# What the programs say they did.
grep -q '^resumed: 3 epochs' "$TMP"/*.out || die "docs/api.md's run.c did not resume"
grep -q '^error: cannot open model spec' "$TMP"/*.out || die "docs/api.md's run.c got no error"
grep -q '^epoch 3: .*accuracy 1.000' "$TMP"/*.out || die "docs/api.md's loop.c did not learn two clusters"
grep -q 'loaded them back' "$TMP"/*.out || die "docs/api.md's loop.c did not load its weights"
grep -q '^served 826 pictures in 100 requests' "$TMP"/*.out || die "docs/api.md's serve.c did not serve"
echo "PASS: the $n C programs of the docs compile, link and run"
