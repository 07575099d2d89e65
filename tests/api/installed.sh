#!/usr/bin/env bash
# libcdl as installed (`make install DESTDIR=...`), used the way a C
# programmer uses it: every public header is installed and compiles on its
# own (nothing else included first) in C11, in C99 and, with a C++
# compiler, in C++11, warning-free under -Wall -Wextra -Wpedantic; then a program is built
# with nothing but `pkg-config --cflags --libs cdl` against the installed
# headers and library, shared and with libcdl.a as docs/api.md says, and
# runs.
. "${top_srcdir:-.}/tests/e2e/common.sh"

command -v pkg-config >/dev/null || { echo "SKIP: pkg-config is not installed"; exit 77; }
. "$top_srcdir/tests/api/make-install.sh"
CC=${CC:-cc}
CXX=${CXX:-g++}
DEST=$(cd "$top_builddir" && pwd)/api-install.$$
trap 'rm -rf "$DEST" "$TMP"' EXIT
make_install "$DEST"
prefix=$(var prefix) libdir=$(var libdir) includedir=$(var includedir) pkgconfigdir=$(var pkgconfigdir)
[ -n "$prefix" ] || die "cannot read prefix from the Makefile"
inc="$DEST$includedir"

# Every header of lib/cdl is installed (a new one must join cdlinclude_HEADERS).
for h in "$top_srcdir"/lib/cdl/*.h; do
    [ -f "$inc/cdl/$(basename "$h")" ] || die "lib/cdl/$(basename "$h") is not installed into $includedir/cdl (cdlinclude_HEADERS in Makefile.am)"
done

have_cxx=1
command -v "$CXX" >/dev/null || { have_cxx=0; echo "no C++ compiler ($CXX): the headers are checked in C only"; }
for h in "$inc"/cdl/*.h; do
    b=$(basename "$h")
    printf '#include <cdl/%s>\nint main(void) { return 0; }\n' "$b" >"$TMP/h.c"
    for std in c11 c99; do   # C99: programs of sites whose code stays there
        "$CC" -std=$std -Wall -Wextra -Wpedantic -Werror -I"$inc" -c "$TMP/h.c" -o "$TMP/h.o" 2>"$TMP/err" ||
            { cat "$TMP/err" >&2; die "cdl/$b does not compile alone in $std"; }
    done
    if [ "$have_cxx" = 1 ]; then
        cp "$TMP/h.c" "$TMP/h.cc"
        "$CXX" -std=c++11 -Wall -Wextra -Wpedantic -Werror -I"$inc" -c "$TMP/h.cc" -o "$TMP/h.o" 2>"$TMP/err" ||
            { cat "$TMP/err" >&2; die "cdl/$b does not compile alone in C++"; }
    fi
done
if [ "$have_cxx" = 1 ]; then   # extern "C": a C++ program links libcdl
    printf '#include <cdl/cdl.h>\n#include <cstdio>\nint main() { std::printf("%%s\\n", cdl_version()); return 0; }\n' >"$TMP/v.cc"
    "$CXX" -I"$inc" "$TMP/v.cc" -L"$DEST$libdir" -lcdl -o "$TMP/v" 2>"$TMP/err" ||
        { cat "$TMP/err" >&2; die "a C++ program calling cdl_version does not link (extern \"C\" in cdl.h)"; }
fi

# The headers' version (cdl/version.h), usable in #if, is the library's,
# the package's and its parts' own.
cat >"$TMP/ver.c" <<'CEOF'
#include <cdl/cdl.h>
#include <stdio.h>
#include <string.h>
#if CDL_VERSION_NUMBER < CDL_VERSION_ENCODE(0, 1, 0)
#error "cdl/version.h: a version below 0.1.0"
#endif
int main(void)
{
    printf("%s %d.%d.%d %s\n", CDL_VERSION_STRING, CDL_VERSION_MAJOR, CDL_VERSION_MINOR,
           CDL_VERSION_PATCH, cdl_version());
    return strcmp(cdl_version(), CDL_VERSION_STRING) != 0;
}
CEOF
"$CC" -std=c11 -Wall -Wextra -Werror -I"$inc" "$TMP/ver.c" -L"$DEST$libdir" -lcdl -o "$TMP/ver" \
    2>"$TMP/err" || { cat "$TMP/err" >&2; die "a program using cdl/version.h does not build"; }
v=$(var VERSION)
got=$(LD_LIBRARY_PATH="$DEST$libdir" "$TMP/ver") || die "cdl_version() is not CDL_VERSION_STRING: $got"
[ "$got" = "$v $v $v" ] || die "versions: '$got', the package's is $v"

# pkg-config on the installed cdl.pc, its directories moved under DEST
# (also a libdir or includedir that configure was given outside prefix).
export PKG_CONFIG_PATH="$DEST$pkgconfigdir"
pc() {
    pkg-config --define-variable=prefix="$DEST$prefix" --define-variable=libdir="$DEST$libdir" \
        --define-variable=includedir="$DEST$includedir" "$@" cdl
}
pc --exists || die "pkg-config does not find cdl.pc in $DEST$pkgconfigdir"
[ "$(pc --modversion)" = "$(var VERSION)" ] || die "cdl.pc's version is not $(var VERSION)"
pc --cflags | grep -qF -- "-I$inc" || die "cdl.pc's Cflags do not name the installed include directory: $(pc --cflags)"
# Libs.private names libraries and where they are, not how the program
# is linked: PMIx's own .pc adds -Wl,--enable-new-dtags, which would make
# a program's own -rpath a RUNPATH (not searched for its libraries'
# libraries, overridden by LD_LIBRARY_PATH).
case " $(pc --libs --static) " in
    *new-dtags*) die "pkg-config --libs --static cdl passes a dependency's link policy on: $(pc --libs --static)";;
esac
prog="$top_srcdir/templates/train.c"
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Wextra -Wpedantic -Werror "$prog" $(pc --cflags --libs) -o "$TMP/train" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; die "templates/train.c does not build with pkg-config --cflags --libs cdl"; }
LD_LIBRARY_PATH="$DEST$libdir" ldd "$TMP/train" | grep -q "$DEST$libdir/libcdl.so" ||
    die "templates/train.c is not linked against the installed libcdl.so"

# A program that runs: the harness on synthetic data, with the installed
# shared library, then with the installed libcdl.a.
cat >"$TMP/run.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <cdl/cdl.h>
int main(void)
{
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "mlp");
    snprintf(cfg.dataset, sizeof cfg.dataset, "synthetic");
    snprintf(cfg.device, sizeof cfg.device, "cpu");
    cfg.synthetic_n = 256;
    cfg.epochs = 1;
    cfg.threads = 1;
    cfg.quiet = 1;
    cdl_train_result res;
    if (cdl_train_run(&cfg, &res) != 0) {
        fprintf(stderr, "%s\n", cdl_last_error());
        return 1;
    }
    printf("libcdl %s: %ld steps\n", cdl_version(), res.steps);
    return 0;
}
C
# shellcheck disable=SC2046
"$CC" -std=c11 "$TMP/run.c" $(pc --cflags --libs) -o "$TMP/run" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; die "a program does not link with pkg-config --cflags --libs cdl"; }
LD_LIBRARY_PATH="$DEST$libdir" "$TMP/run" >"$TMP/out" 2>&1 ||
    { cat "$TMP/out" >&2; die "the program linked against the installed libcdl.so fails"; }
grep -q "^libcdl $(var VERSION): 4 steps" "$TMP/out" || { cat "$TMP/out" >&2; die "unexpected output of the program"; }
# A CUDA build installs its CUDA backend as a module beside libcdl
# (LIBDIR/cdl/cdl-cuda.so, kernels/cuda/loader.c): libcdl.so needs no
# NVIDIA library, and a program that asks for a GPU loads the module from
# there (then says there is no GPU, on a machine without one).
cat >"$TMP/gpu.c" <<'C'
#include <stdio.h>
#include <cdl/cdl.h>
int main(void)
{
    cdl_backend *be = cdl_backend_cuda_create(-1);
    printf("%s\n", be ? "a GPU" : cdl_last_error());
    cdl_backend_destroy(be);
    return 0;
}
C
cuda=$(var CUDA_LIBS)
if [ -n "$cuda" ]; then
    [ -f "$DEST$libdir/cdl/cdl-cuda.so" ] || die "a CUDA build installed no $libdir/cdl/cdl-cuda.so"
    readelf -d "$DEST$libdir/libcdl.so" | grep -E 'NEEDED.*lib(cudart|cublas|cudnn|nccl)' &&
        die "the installed libcdl.so needs NVIDIA libraries itself (they belong to cdl-cuda.so)"
    # shellcheck disable=SC2046
    "$CC" -std=c11 "$TMP/gpu.c" $(pc --cflags --libs) -o "$TMP/gpu" 2>"$TMP/err" ||
        { cat "$TMP/err" >&2; die "a program asking for a GPU does not link with pkg-config --cflags --libs cdl"; }
    LD_DEBUG=files LD_LIBRARY_PATH="$DEST$libdir" "$TMP/gpu" >"$TMP/out" 2>"$TMP/ld" ||
        { cat "$TMP/out" >&2; die "the program asking for a GPU fails"; }
    grep -q "file=$DEST$libdir/cdl/cdl-cuda.so " "$TMP/ld" ||
        { cat "$TMP/out" >&2; die "cdl_backend_cuda_create did not load the installed $libdir/cdl/cdl-cuda.so"; }
    grep -q -e '^a GPU$' -e 'no CUDA GPU is visible' "$TMP/out" ||
        { cat "$TMP/out" >&2; die "unexpected answer of cdl_backend_cuda_create through the installed module"; }
    echo "the CUDA module is installed as $libdir/cdl/cdl-cuda.so and loaded from there: $(cat "$TMP/out")"
fi
# The complete programs of the docs (docs/api.md's run.c, loop.c, serve.c)
# build as each one's first comment says, `cc NAME.c $(pkg-config --cflags
# --libs cdl) -o NAME`, against the installed headers alone
# (tests/api/docs.sh builds and runs them against the source tree).
ndoc=0
for doc in "$top_srcdir"/README.md "$top_srcdir"/docs/*.md; do
    awk -v out="$TMP/doc-$(basename "$doc" .md)-" '
        /^```c[[:space:]]*$/ { k++; f = out k ".c"; printf "" > f; next }
        /^```/ { f = ""; next }
        f != "" { print >> f }' "$doc"
done
for src in $(grep -l -E '^int main\(' "$TMP"/doc-*.c 2>/dev/null); do
    name=$(sed -n '1s|^/\* \([a-z_]*\)\.c: .*|\1|p' "$src")
    [ -n "$name" ] || die "a C program of the docs does not start with '/* NAME.c: ...': $(head -1 "$src")"
    grep -qF " *   cc $name.c \$(pkg-config --cflags --libs cdl) -o $name" "$src" ||
        die "$name.c of the docs does not give its build line 'cc $name.c \$(pkg-config --cflags --libs cdl) -o $name'"
    mkdir -p "$TMP/docs" && cp "$src" "$TMP/docs/$name.c"
    # shellcheck disable=SC2046
    (cd "$TMP/docs" && "$CC" -std=c11 -Wall -Wextra -Wpedantic -Werror "$name.c" $(pc --cflags --libs) -o "$name") \
        2>"$TMP/err" || { cat "$TMP/err" >&2; die "$name.c of the docs does not build against the installed libcdl"; }
    ndoc=$((ndoc + 1))
done
[ "$ndoc" -ge 3 ] || die "only $ndoc C programs found in the docs: the check is blind"
echo "the $ndoc C programs of the docs build as their comments say against the installed libcdl"
if [ -f "$DEST$libdir/libcdl.a" ]; then
    # docs/api.md's static link: libcdl.a, the libraries of Libs.private shared.
    # shellcheck disable=SC2046
    "$CC" -std=c11 "$TMP/run.c" $(pc --cflags) -Wl,-Bstatic $(pc --libs) -Wl,-Bdynamic \
        $(pc --libs --static | sed 's/-lcdl//') -o "$TMP/run-static" 2>"$TMP/err" ||
        { cat "$TMP/err" >&2; die "libcdl.a does not link with pkg-config --libs --static cdl (Libs.private in cdl.pc.in)"; }
    readelf -d "$TMP/run-static" 2>/dev/null | grep -q 'NEEDED.*libcdl' &&
        die "the static link of docs/api.md still needs libcdl.so"
    "$TMP/run-static" >"$TMP/out" 2>&1 || { cat "$TMP/out" >&2; die "the program linked with libcdl.a fails"; }
    grep -q ': 4 steps' "$TMP/out" || die "unexpected output of the program linked with libcdl.a"
    if [ -n "$cuda" ]; then
        # The CUDA module serves the shared libcdl only: a static program
        # asking for a GPU is told so, and loads nothing.
        # shellcheck disable=SC2046
        "$CC" -std=c11 "$TMP/gpu.c" $(pc --cflags) -Wl,-Bstatic $(pc --libs) -Wl,-Bdynamic \
            $(pc --libs --static | sed 's/-lcdl//') -o "$TMP/gpu-static" 2>"$TMP/err" ||
            { cat "$TMP/err" >&2; die "a program asking for a GPU does not link with libcdl.a"; }
        "$TMP/gpu-static" >"$TMP/out" 2>&1 || { cat "$TMP/out" >&2; die "the static program asking for a GPU fails"; }
        grep -q 'links libcdl statically' "$TMP/out" ||
            { cat "$TMP/out" >&2; die "a static program asking for a GPU is not told that the CUDA module needs the shared libcdl"; }
    fi
    # libcdl.a defines no global symbol but cdl_*, like libcdl.so: a program
    # with functions of its own named as libcdl's internal ones links with it.
    nm -g --defined-only "$DEST$libdir/libcdl.a" 2>/dev/null | awk 'NF == 3 { print $3 }' |
        sort -u >"$TMP/defined"
    grep -q '^cdl_train_run$' "$TMP/defined" || die "nm finds no cdl_train_run in libcdl.a: the check is blind"
    grep -v '^cdl_' "$TMP/defined" >"$TMP/foreign" &&
        die "libcdl.a defines global symbols outside cdl_* (install-exec-hook-static in Makefile.am): $(head -5 "$TMP/foreign" | tr '\n' ' ')"
    cat >"$TMP/own.c" <<'C'
#include <stdio.h>
#include <cdl/cdl.h>
/* The program's own helpers, named as libcdl's internal functions are. */
int json_init(void) { return 1; }
void *pool_create(int n) { return n ? NULL : NULL; }
int store_open(void) { return 2; }
int main(void)
{
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    printf("%d %d %s\n", json_init() + store_open(), pool_create(1) == NULL, cdl_version());
    return 0;
}
C
    # shellcheck disable=SC2046
    "$CC" -std=c11 "$TMP/own.c" $(pc --cflags) -Wl,-Bstatic $(pc --libs) -Wl,-Bdynamic \
        $(pc --libs --static | sed 's/-lcdl//') -o "$TMP/own" 2>"$TMP/err" ||
        { cat "$TMP/err" >&2; die "a program with a function named json_init does not link with libcdl.a"; }
    [ "$("$TMP/own")" = "3 1 $(var VERSION)" ] || die "the program with its own json_init, linked with libcdl.a, runs wrong"
fi
echo "PASS: installed headers compile alone (C11, C99$([ "$have_cxx" = 1 ] && echo ', C++')), programs build with pkg-config and run (shared$([ -f "$DEST$libdir/libcdl.a" ] && echo ', static'))"
