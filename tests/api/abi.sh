#!/usr/bin/env bash
# The layout of every public struct against tests/api/abi.txt (x86-64),
# so that a change which breaks programs of an older release running
# with this libcdl.so.0 (same soname) is seen when it is made:
#  - a field's offset or type may never change: add fields at the end;
#    an enum's constants likewise keep their order (and so their numbers);
#  - a struct that programs allocate (a cdl_dataset, a cdl_model_spec,
#    a cdl_train_result) may not grow either: an older program's is then
#    too small for what libcdl writes into it;
#  - the sized ones (size_t size first: cdl_X_defaults sets it to the
#    program's sizeof, lib/core/sized.h) may grow at the end, and so may
#    those only libcdl allocates (cdl_backend and its ops).
# A change that has to break that needs a new soname (CDL_LT_VERSION in
# configure.ac). After an allowed change: ABI_UPDATE=1 tests/api/abi.sh
# rewrites the baseline, to commit with it.
. "${top_srcdir:-.}/tests/e2e/common.sh"
BASE="$top_srcdir/tests/api/abi.txt"
command -v gdb >/dev/null || { echo "SKIP: gdb is not installed (it prints the layouts)"; exit 77; }
[ "$(uname -m)" = x86_64 ] || { echo "SKIP: the baseline is of x86-64"; exit 77; }
CC=${CC:-cc}

printf '#include <cdl/cdl.h>\n' >"$TMP/h.c"
$CC -std=c11 -g -fno-eliminate-unused-debug-types -c -I"$top_srcdir/lib" "$TMP/h.c" \
    -o "$TMP/h.o" || die "cannot compile cdl/cdl.h"
# The typedef names (`} cdl_x;`, of anonymous structs too) and struct tags.
$CC -std=c11 -E -P -I"$top_srcdir/lib" "$TMP/h.c" |
    grep -oE '^(\} cdl_[a-z0-9_]+;|(struct|enum) cdl_[a-z0-9_]+ \{)' |
    sed 's/^} //; s/;$//; s/^\(struct\|enum\) \(.*\) {$/\1 \2/' | sort -u >"$TMP/types"
args=()
while read -r t; do
    name=${t#struct }
    args+=(-ex "echo @@ ${name#enum }\\n" -ex "ptype /o $t")
done <"$TMP/types"
# Structs, and enums (their constants in order, on one line); holes are
# what fields leave.
gdb -q -batch -nx -ex 'set max-value-size unlimited' "${args[@]}" "$TMP/h.o" 2>&1 |
    sed 's#^/\* offset *| *size \*/ *type = #type = #' |
    awk '/^@@ / { name = $2; keep = 0; next }
         /^type = enum/ { print "@@ " name; print; next }
         /^type = struct/ { keep = 1; print "@@ " name }
         keep && !/XXX/ && !/^ *$/' >"$TMP/now"
grep -q '^@@ cdl_train_config' "$TMP/now" || die "gdb printed no cdl_train_config: the check is blind"
if [ -n "${ABI_UPDATE:-}" ]; then cp "$TMP/now" "$BASE"; echo "wrote $BASE"; exit 0; fi

# type -> its lines, one file each.
split_types() {
    mkdir -p "$2"
    awk -v d="$2" '/^@@ / { f = d "/" $2; next } f { print > f }' "$1"
}
split_types "$BASE" "$TMP/base.d"
split_types "$TMP/now" "$TMP/now.d"
bad=0
for f in "$TMP"/base.d/*; do
    t=$(basename "$f")
    n="$TMP/now.d/$t"
    [ -f "$n" ] || { echo "$t: no longer a public struct (programs of older releases use it)" >&2; bad=1; continue; }
    if grep -q '^type = enum' "$f"; then
        # Constants only appended: an older program's numbers keep their meaning.
        was=$(sed 's/}$//' "$f")
        case "$(cat "$n")" in
            "$was"*) continue ;;
        esac
        echo "$t: its constants changed (add new ones at the end only): was $(cat "$f"), is $(cat "$n")" >&2
        bad=1
        continue
    fi
    grep -v 'total size' "$f" | sed '/^ *}$/d' >"$TMP/b"
    grep -v 'total size' "$n" | sed '/^ *}$/d' >"$TMP/c"
    if ! head -n "$(wc -l <"$TMP/b")" "$TMP/c" | cmp -s - "$TMP/b"; then
        echo "$t: a field moved or changed (fields are added at the end only):" >&2
        diff "$TMP/b" "$TMP/c" | head -8 >&2
        bad=1
        continue
    fi
    was=$(grep -oE 'total size \(bytes\): +[0-9]+' "$f" | grep -oE '[0-9]+$')
    is=$(grep -oE 'total size \(bytes\): +[0-9]+' "$n" | grep -oE '[0-9]+$')
    [ "$was" = "$is" ] && continue
    if sed -n 2p "$n" | grep -q ' size_t size;$' || [ "$t" = cdl_backend ] || [ "$t" = cdl_backend_ops ]; then
        continue
    fi
    echo "$t: $was bytes became $is: programs allocate it, and an older one's would be too small" \
         "for this libcdl (keep its size, or put the new fields in a sized struct)" >&2
    bad=1
done
[ "$bad" = 0 ] || die "the public structs or enums changed in a way that breaks programs of older releases on this libcdl.so.0 (tests/api/abi.sh says what is allowed)"
new=$(comm -13 <(ls "$TMP/base.d") <(ls "$TMP/now.d") | tr '\n' ' ')
[ -z "$new" ] || echo "note: new public types $new(ABI_UPDATE=1 $0 adds them to the baseline)"
echo "PASS: the public structs and enums keep the layout programs of older releases were built with"
