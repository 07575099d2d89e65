/* Test only: the CPU emulation (emu.h) of the warp-level matrix
 * instructions that kernels/cuda/mma.cuh wraps: mma.sync.aligned.m16n8k16
 * .row.col.f32.bf16.bf16.f32 and ldmatrix.sync.aligned.m8n8.x4{.trans}
 * .shared.b16.
 *
 * Unlike nvcuda::wmma (emu_wmma.h), these instructions document which
 * elements each lane holds, and kernels build on that (softmax rows in the
 * registers of the 4 lanes that hold them, accumulators repacked as
 * operands). So the emulation keeps exactly the per-lane registers of the
 * PTX ISA and moves elements between lanes as the hardware does, following
 * its documented fragment layouts (PTX ISA, "Warp Level Matrix Multiply-
 * Accumulate Instructions": "Matrix Fragments for mma.m16n8k16 with
 * floating point type", figures "MMA .m16n8k16 fragment layout for matrix
 * A / matrix B / accumulator matrix C/D" with .bf16 and .f32; and
 * "Warp-level matrix load instruction: ldmatrix", figure "ldmatrix fragment
 * layout"). With groupID = lane >> 2 and tig = lane % 4 (threadID_in_group):
 *   A (16 x 16, row): register j (j = 0..3) holds elements a_2j (low 16
 *     bits) and a_2j+1 (high); a_i is at row groupID (+ 8 for i = 2, 3, 6,
 *     7), column tig * 2 + (i & 1) (+ 8 for i >= 4);
 *   B (16 x 8, col): register j holds b_2j (low) and b_2j+1; b_i is at row
 *     (k) tig * 2 + (i & 1) (+ 8 for i >= 2), column groupID;
 *   C, D (16 x 8, f32): c_i at row groupID (+ 8 for i >= 2), column
 *     tig * 2 + (i & 1);
 *   ldmatrix .x4: lanes 8 m .. 8 m + 7 give the addresses of rows 0..7 of
 *     matrix m (16 bytes each, 16-byte aligned); register m of every lane
 *     receives row groupID, columns tig * 2 and tig * 2 + 1 (low, high) of
 *     matrix m; with .trans the matrix is read column-major: row tig * 2
 *     and tig * 2 + 1 (low, high), column groupID.
 * A bf16 pair is a 32-bit register with the lower-indexed element in the
 * low 16 bits ("Elements (low to high)" in the fragment tables).
 *
 * Every call is warp-collective, as on a GPU: each lane deposits a pointer
 * to its operands (L->coll), waits at the warp, computes its own outputs
 * from the deposits of the others, and waits again before it may change
 * its operands. It aborts when a lane of the warp has exited or waits
 * elsewhere (at another instruction, a shuffle, __syncwarp), when the
 * block's threads are not whole warps, and on a misaligned ldmatrix row:
 * what a GPU leaves undefined. The products of mma are exact in fp32
 * (bf16 x bf16) and added to c in k order, each sum rounded to fp32 (the
 * emulation's flags keep the compiler from fusing them); tensor cores add
 * in an order and with a rounding of their own, which the tests' bounds
 * allow for (docs/cuda.md, "bf16").
 */
#ifndef CDL_TESTS_FAKEGPU_EMU_MMA_H
#define CDL_TESTS_FAKEGPU_EMU_MMA_H

/* What a lane hands its warp at one instruction. */
struct cuk_emu_warp_op {
    const char *what;     /* the instruction: lanes must agree */
    uint32_t r[6];        /* mma: a0..a3, b0, b1 */
    const void *row;      /* ldmatrix: this lane's row address */
};

[[noreturn]] inline void cuk_emu_warp_op_abort(const char *what, const char *why)
{
    std::fprintf(stderr, "emu_mma.h: %s in block (%u,%u,%u), thread %u: %s\n", what, blockIdx.x,
                 blockIdx.y, blockIdx.z, cuk_emu_now ? cuk_emu_now->current : 0u, why);
    std::abort();
}

/* Deposits op for the calling lane and waits for its warp; lanes[i] is
 * then lane i's deposit, valid until cuk_emu_warp_op_end. */
inline void cuk_emu_warp_op_begin(const cuk_emu_warp_op *op, const cuk_emu_warp_op *lanes[32])
{
    cuk_emu_launch_state *L = cuk_emu_now;
    if (!L)
        cuk_emu_warp_op_abort(op->what, "called outside a kernel");
    unsigned t = L->current, w0 = t & ~31u;
    if (L->n % 32)
        cuk_emu_warp_op_abort(op->what, "needs whole warps (the block's threads are not a "
                              "multiple of 32)");
    L->coll[t] = op;
    cuk_emu_wait(CUK_EMU_AT_WARP);
    for (unsigned i = 0; i < 32; i++) {
        const cuk_emu_warp_op *o = (const cuk_emu_warp_op *)L->coll[w0 + i];
        if (L->state[w0 + i] == CUK_EMU_DONE)
            cuk_emu_warp_op_abort(op->what, "a lane of the warp has exited");
        if (!o || std::strcmp(o->what, op->what))
            cuk_emu_warp_op_abort(op->what, "the lanes of the warp are not all at this "
                                  "instruction (it is warp-collective)");
        lanes[i] = o;
    }
}

/* Every lane has read the deposits: each may change its operands. */
inline void cuk_emu_warp_op_end()
{
    cuk_emu_launch_state *L = cuk_emu_now;
    cuk_emu_wait(CUK_EMU_AT_WARP);
    L->coll[L->current] = nullptr;
}

/* Element `half` (0: low 16 bits) of a bf16 pair, as a float. */
inline float cuk_emu_bf16_half(uint32_t pair, unsigned half)
{
    __nv_bfloat16 b;
    b.__x = (unsigned short)(pair >> (16 * half));
    return __bfloat162float(b);
}

/* d += A B, one m16n8k16 bf16 product with fp32 accumulators. */
inline void cuk_emu_mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    cuk_emu_warp_op op = {"mma.sync.m16n8k16 (bf16)", {a[0], a[1], a[2], a[3], b[0], b[1]},
                          nullptr};
    const cuk_emu_warp_op *lanes[32];
    cuk_emu_warp_op_begin(&op, lanes);
    unsigned lane = cuk_emu_now->current % 32u, group = lane >> 2, tig = lane % 4;
    float out[4];
    for (unsigned i = 0; i < 4; i++) {
        unsigned row = group + (i >= 2 ? 8 : 0), col = tig * 2 + (i & 1);
        float acc = d[i];
        for (unsigned k = 0; k < 16; k++) {
            /* A (row, k): lane (row % 8) * 4 + (k % 8) / 2, register
             * (row >= 8) + 2 (k >= 8); B (k, col): lane col * 4 + (k % 8) / 2,
             * register k >= 8; element k & 1 of the pair. */
            uint32_t ar = lanes[(row % 8) * 4 + (k % 8) / 2]->r[(row >= 8) + 2 * (k >= 8)];
            uint32_t br = lanes[col * 4 + (k % 8) / 2]->r[4 + (k >= 8)];
            acc += cuk_emu_bf16_half(ar, k & 1) * cuk_emu_bf16_half(br, k & 1);
        }
        out[i] = acc;
    }
    cuk_emu_warp_op_end();
    std::memcpy(d, out, sizeof out);
}

/* ldmatrix .x4 (trans = 0) or .x4.trans of four 8x8 bf16 matrices. */
inline void cuk_emu_ldmatrix_x4(uint32_t r[4], const void *row, bool trans)
{
    cuk_emu_warp_op op = {trans ? "ldmatrix.x4.trans" : "ldmatrix.x4", {0, 0, 0, 0, 0, 0}, row};
    if ((uintptr_t)row % 16)
        cuk_emu_warp_op_abort(op.what, "a row address that is not 16-byte aligned");
    const cuk_emu_warp_op *lanes[32];
    cuk_emu_warp_op_begin(&op, lanes);
    unsigned lane = cuk_emu_now->current % 32u, group = lane >> 2, tig = lane % 4;
    uint32_t out[4];
    for (unsigned m = 0; m < 4; m++) {
        uint16_t e[2];
        for (unsigned h = 0; h < 2; h++)
            e[h] = trans ? ((const uint16_t *)lanes[8 * m + tig * 2 + h]->row)[group]
                         : ((const uint16_t *)lanes[8 * m + group]->row)[tig * 2 + h];
        out[m] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
    cuk_emu_warp_op_end();
    std::memcpy(r, out, sizeof out);
}

#endif
