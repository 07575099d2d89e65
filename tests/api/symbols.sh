#!/usr/bin/env bash
# libcdl's ABI is its public headers: every function the shared library
# exports is declared in lib/cdl/*.h, and every function the headers
# declare (other than static inline ones) is exported. lib/libcdl.map
# lists the exports by name, so a new function listed nowhere is missing
# here; and an internal helper that starts with cdl_ must not be listed.
. "${top_srcdir:-.}/tests/e2e/common.sh"

SO="$top_builddir/.libs/libcdl.so"
[ -f "$SO" ] || { echo "SKIP: no shared libcdl (configured with --disable-shared)"; exit 77; }
command -v nm >/dev/null || { echo "SKIP: nm is not installed (binutils)"; exit 77; }
CC=${CC:-cc}

# Exported: defined dynamic symbols (text and data) of the library.
nm -D --defined-only "$SO" | awk '$2 ~ /^[TtDdBbRrWwVv]$/ { print $3 }' |
    sed 's/@.*//' | sort -u >"$TMP/exported"
grep -q '^cdl_version$' "$TMP/exported" || die "nm finds no cdl_version in $SO: the check is blind"
grep -v '^cdl_' "$TMP/exported" >"$TMP/foreign" &&
    die "$SO exports symbols outside cdl_*: $(head -5 "$TMP/foreign" | tr '\n' ' ') (lib/libcdl.map)"

# Declared: the names of cdl_ functions in the preprocessed headers, less
# those defined static inline there (nothing to export).
printf '#include <cdl/cdl.h>\n' >"$TMP/all.c"
$CC -std=c11 -E -P -I"$top_srcdir/lib" "$TMP/all.c" >"$TMP/pp" || die "cannot preprocess cdl/cdl.h"
grep -oE '\bcdl_[A-Za-z0-9_]+[[:space:]]*\(' "$TMP/pp" | sed 's/[[:space:](]*$//' |
    sort -u >"$TMP/named"
tr '\n' ' ' <"$TMP/pp" | grep -oE 'static inline [^(]*\bcdl_[A-Za-z0-9_]+ *\(' |
    grep -oE 'cdl_[A-Za-z0-9_]+ *\($' | sed 's/[[:space:](]*$//' | sort -u >"$TMP/inline"
comm -23 "$TMP/named" "$TMP/inline" >"$TMP/declared"
grep -q '^cdl_train_run$' "$TMP/declared" || die "no cdl_train_run among the declarations: the check is blind"

extra=$(comm -23 "$TMP/exported" "$TMP/declared" | tr '\n' ' ')
[ -z "$extra" ] || die "libcdl exports functions no public header declares: $extra(internal functions must not start with cdl_: docs/hacking.md)"
missing=$(comm -13 "$TMP/exported" "$TMP/declared" | tr '\n' ' ')
[ -z "$missing" ] || die "public headers declare functions libcdl does not export (a program calling them fails to link): $missing(list a new function in lib/libcdl.map, in the node of the release that adds it)"
# Versions (lib/libcdl.map): every function has one, so that a program
# records what it needs and an older libcdl lacking it is refused at start;
# the entry points of the cdl_X_defaults macros are in CDL_0.2, the rest in
# CDL_0.1, which programs linked before the versions existed bind to.
unversioned=$(nm -D --defined-only "$SO" | awk '$2 ~ /^[TtDdBbRrWwVv]$/ && $3 !~ /@/ { print $3 }' |
    grep -v '^CDL_' | tr '\n' ' ')
[ -z "$unversioned" ] || die "libcdl exports functions without a version: $unversioned(lib/libcdl.map)"
nm -D --defined-only "$SO" | grep -q ' cdl_train_defaults_sized@@CDL_0.2$' ||
    die "cdl_train_defaults_sized is not of version CDL_0.2 (lib/libcdl.map)"
nm -D --defined-only "$SO" | grep -q ' cdl_train_defaults@@CDL_0.1$' ||
    die "cdl_train_defaults is not of version CDL_0.1 (lib/libcdl.map)"
sized=$(grep -oE 'cdl_[a-z_]+_sized\b' "$TMP/declared" | sort -u | tr '\n' ' ')
for f in $sized; do
    nm -D --defined-only "$SO" | grep -q " $f@@CDL_0.2\$" || die "$f is not of version CDL_0.2 (lib/libcdl.map)"
done
echo "PASS: libcdl exports the $(wc -l <"$TMP/exported") functions of its headers, and only those"
