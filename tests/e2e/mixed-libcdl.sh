#!/usr/bin/env bash
# Two installations side by side (module load cdl/2 while LD_LIBRARY_PATH
# still names cdl/1's libdir) run a program with an older libcdl.so.0 of
# the same soname. Its cdl_train_defaults sized the config as the older
# release knew it, so every newer option was ignored without a word. Each
# program now refuses an older libcdl, naming both releases and the
# variable; --version still prints them.
. "${top_srcdir:-.}/tests/e2e/common.sh"
OLD="$top_builddir/tests/e2e/.libs/old-libcdl.so"
[ -f "$OLD" ] || die "$OLD is not built (make check builds it)"
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$top_builddir/config.h")

older() { env LD_PRELOAD="$OLD" LD_LIBRARY_PATH=/opt/cdl/1/lib "$@"; }
expect_status 2 older "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 --device cpu \
    --no-progress --min-lr 0.001
expect_err "this cdl-train is of cdl $version but runs with an older libcdl, cdl 0.0.1"
# (the build tree's libtool wrapper puts its own directory first)
grep -q "LD_LIBRARY_PATH=.*/opt/cdl/1/lib comes before its run path" "$TMP/err" ||
    { cat "$TMP/err" >&2; die "the refusal does not name LD_LIBRARY_PATH"; }
expect_err "old-libcdl.so), which would ignore what it does not know"
[ ! -s "$TMP/out" ] || die "cdl-train trained with the older libcdl: $(cat "$TMP/out")"
for prog in cdl-eval cdl-predict cdl-generate; do
    expect_status 2 older "$top_builddir/cli/$prog" "$TMP/none.safetensors"
    expect_err "this $prog is of cdl $version but runs with an older libcdl, cdl 0.0.1"
done
expect_status 0 older "$CDL_TRAIN" --version
grep -q "^libcdl 0.0.1 (this cdl-train was built with $version)" "$TMP/out" ||
    die "cdl-train --version does not name the older libcdl: $(cat "$TMP/out")"
# One of the same release number but an earlier build, without the
# functions this build's programs need (lib/libcdl.map's newest node):
# before, the number matched, and the first call of a missing function
# killed the program (symbol lookup error, 127).
EARLIER="$top_builddir/tests/e2e/.libs/old-libcdl-build.so"
[ -f "$EARLIER" ] || die "$EARLIER is not built (make check builds it)"
mkdir "$TMP/earlier" && ln -s "$(cd "$(dirname "$EARLIER")" && pwd)/old-libcdl-build.so" "$TMP/earlier/libcdl.so.0"
for prog in cdl-train cdl-eval cdl-predict cdl-generate; do
    bin="$top_builddir/cli/.libs/$prog"
    [ -x "$bin" ] || bin="$top_builddir/cli/$prog"   # (no libtool wrapper)
    expect_status 2 env LD_LIBRARY_PATH="$TMP/earlier" "$bin" "$TMP/none.safetensors"
    expect_err "this $prog is of cdl $version but runs with an older libcdl, cdl $version of an earlier build ($TMP/earlier/libcdl.so.0)"
done
# Its own library: no refusal.
expect_status 0 "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 --device cpu \
    --no-progress --batch-size 32 --val-split 0 --model mlp --quiet
echo "PASS: an older libcdl is refused by name"
