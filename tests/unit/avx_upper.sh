#!/bin/sh
# No CPU kernel jumps from AVX code into SSE code with the upper halves of
# the vector registers dirty. GCC emits no vzeroupper before a sibling call
# (a tail call compiled as a jump), and SSE instructions run after it carry
# a false dependency on the upper halves, to the next vzeroupper: layer
# norm's backward once ran at half speed that way (kernels/cpu/simd.h,
# cpu_avx_leave). The check reads the disassembly of libcdl's objects: a
# function that uses ymm or zmm registers and jumps to another function
# whose code has legacy-SSE instructions must have executed vzeroupper
# before the jump, with no ymm or zmm register named in between (read in
# address order, which is how the compiler lays out such tails). Skipped
# (77) without objdump or off x86-64.
set -u
lib=${top_builddir:-.}/.libs/libcdl_core.a
command -v objdump >/dev/null 2>&1 || { echo "avx_upper.sh: no objdump: skipped"; exit 77; }
[ "$(uname -m)" = x86_64 ] || { echo "avx_upper.sh: not x86-64: skipped"; exit 77; }
[ -f "$lib" ] || { echo "avx_upper.sh: $lib missing" >&2; exit 1; }
objdump -d --no-show-raw-insn "$lib" | awk '
    # Legacy (non-VEX) SSE arithmetic, moves and conversions: mnemonics
    # without the v prefix.
    function sse(ins) {
        return ins ~ /^(add|sub|mul|div|min|max|sqrt|and|andn|or|xor)(ss|sd|ps|pd)$/ ||
               ins ~ /^(movss|movsd|movaps|movups|movapd|movupd|ucomiss|ucomisd|comiss|comisd)$/ ||
               ins ~ /^cvt[a-z0-9]+$/ || ins ~ /^(unpcklps|unpckhps|shufps|pxor|movd|movq)$/
    }
    /^[0-9a-f]+ <[^>]+>:$/ { f = $2; gsub(/[<>:]/, "", f); clean = 0; next }
    /^ *[0-9a-f]+:\t/ {
        split($0, p, "\t"); ins = p[2]; sub(/ .*/, "", ins)
        rest = p[2]
        if (rest ~ /%[yz]mm/) { wide[f] = 1; clean = 0 }
        if (ins == "vzeroupper") clean = 1
        if (sse(ins)) legacy[f] = 1
        if (ins == "jmp" && rest ~ /<[^>+]+>$/) {
            t = rest; sub(/.*</, "", t); sub(/>$/, "", t)
            if (t != f) { n++; jf[n] = f; jt[n] = t; jz[n] = clean }
        }
    }
    END {
        bad = 0
        for (i = 1; i <= n; i++)
            if (wide[jf[i]] && legacy[jt[i]] && !jz[i]) {
                printf "avx_upper.sh: %s jumps to %s (SSE code) without vzeroupper: call cpu_avx_leave() first\n", jf[i], jt[i]
                bad = 1
            }
        printf "avx_upper.sh: %d jumps between functions checked\n", n
        exit bad
    }'
