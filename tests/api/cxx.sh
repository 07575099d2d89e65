#!/usr/bin/env bash
# libcdl from C++: every public header compiles on its own in each C++
# standard from C++98 to C++20 with each C++ compiler there is (configure's
# CXX, and clang++ and g++ when installed), warning-free under -Wall
# -Wextra -Wpedantic; templates/train.c compiles as C++; and
# tests/api/cxx_use.cc, a C++ program holding libcdl's objects in
# unique_ptr and passing a lambda as a callback, links the shared libcdl
# and runs. Skipped without a C++ compiler.
. "${top_srcdir:-.}/tests/e2e/common.sh"

LIBDIR=$(cd "$top_builddir" && pwd)/.libs
[ -f "$LIBDIR/libcdl.so" ] || { echo "SKIP: no shared libcdl (configured with --disable-shared)"; exit 77; }
cxxs=()
for c in "${CXX:-}" g++ clang++; do
    [ -n "$c" ] && command -v "${c%% *}" >/dev/null || continue
    case " ${cxxs[*]} " in *" $c "*) ;; *) cxxs+=("$c");; esac
done
[ ${#cxxs[@]} -gt 0 ] || { echo "SKIP: no C++ compiler (configure CXX=..., or install g++)"; exit 77; }

flags=(-Wall -Wextra -Wpedantic -Werror -I"$top_srcdir/lib")
checked=()
for cxx in "${cxxs[@]}"; do
    for std in c++98 c++11 c++14 c++17 c++20; do
        # A compiler too old for a standard says so on an empty file: skip it.
        echo 'int main() { return 0; }' >"$TMP/empty.cc"
        # shellcheck disable=SC2086
        $cxx -std=$std -c "$TMP/empty.cc" -o "$TMP/empty.o" 2>/dev/null || continue
        for h in "$top_srcdir"/lib/cdl/*.h; do
            b=$(basename "$h")
            printf '#include <cdl/%s>\nint main() { return 0; }\n' "$b" >"$TMP/h.cc"
            # shellcheck disable=SC2086
            $cxx -std=$std "${flags[@]}" -c "$TMP/h.cc" -o "$TMP/h.o" 2>"$TMP/err" ||
                { cat "$TMP/err" >&2; die "cdl/$b does not compile alone as $std with $cxx"; }
        done
        [ $std = c++98 ] && { checked+=("$cxx $std"); continue; }   # the rest needs C++11
        # shellcheck disable=SC2086
        $cxx -std=$std "${flags[@]}" -x c++ -c "$top_srcdir/templates/train.c" -o "$TMP/train.o" \
            2>"$TMP/err" || { cat "$TMP/err" >&2; die "templates/train.c does not compile as $std with $cxx"; }
        # shellcheck disable=SC2086
        $cxx -std=$std "${flags[@]}" "$top_srcdir/tests/api/cxx_use.cc" -L"$LIBDIR" \
            -Wl,-rpath,"$LIBDIR" -lcdl -o "$TMP/cxx_use" 2>"$TMP/err" ||
            { cat "$TMP/err" >&2; die "tests/api/cxx_use.cc does not build as $std with $cxx"; }
        "$TMP/cxx_use" >"$TMP/out" 2>&1 || { cat "$TMP/out" >&2; die "cxx_use ($std, $cxx) fails"; }
        grep -q '^cxx_use: libcdl .*, 4 steps$' "$TMP/out" || { cat "$TMP/out" >&2; die "cxx_use ($std, $cxx): unexpected output"; }
        checked+=("$cxx $std")
    done
done
[ ${#checked[@]} -gt 0 ] || die "no C++ standard could be checked with ${cxxs[*]}"
echo "PASS: the headers, templates/train.c and a C++ program with ${checked[*]}"
