/* The emulated warp-level matrix instructions (tests/fakegpu/emu_mma.h,
 * through kernels/cuda/mma.cuh) against the PTX ISA's fragment layouts,
 * written out here a second time, forward (which element a lane's
 * register holds), where emu_mma.h goes backward (which lane and register
 * hold an element). Compiled like the .cu kernels for the fake GPU (emu.h
 * forced in), one warp per launch, run at once on the CPU:
 *   - mma.sync m16n8k16: D = A B + C with each lane's a, b, c built by the
 *     layouts, against the product computed here (small integers: exact in
 *     bf16 and in any summation order);
 *   - ldmatrix .x4 of a 16 x 16 tile addressed as the A operand's four 8x8
 *     quarters: each lane's registers are the A layout's;
 *   - ldmatrix .x4.trans: each register holds its matrix's column groupID,
 *     rows tig * 2 and tig * 2 + 1;
 *   - the A operand that cuk_c2a makes of two accumulators.
 * Exit 0 when all agree, 1 otherwise. */
#include "kernels/cuda/mma.cuh"

static int fails;

/* what[i][j] (a lane and register, or a row and column) is got, not want. */
static void expect(const char *what, int i, int j, double got, double want)
{
    if (got != want && fails++ < 10)
        std::printf("FAIL %s [%d][%d]: %g, expected %g\n", what, i, j, got, want);
}

/* The layouts (groupID = lane >> 2, tig = lane % 4). Element i of A is in
 * register i / 2 (low half for even i). */
static int a_row(int lane, int i)
{
    return (lane >> 2) + ((i % 4) >= 2 ? 8 : 0);
}
static int a_col(int lane, int i)
{
    return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0);
}
static int b_row(int lane, int i)
{
    return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0);
}
static int b_col(int lane, int)
{
    return lane >> 2;
}
static int c_row(int lane, int i)
{
    return (lane >> 2) + (i >= 2 ? 8 : 0);
}
static int c_col(int lane, int i)
{
    return (lane % 4) * 2 + (i & 1);
}

static float lo(uint32_t r)
{
    return cuk_emu_bf16_half(r, 0);
}
static float hi(uint32_t r)
{
    return cuk_emu_bf16_half(r, 1);
}

static float A[16][16], B[16][8], Cm[16][8], D[16][8];
static __nv_bfloat16 tile[16][24];   /* 16 x 16, rows padded to 48 bytes */
static uint32_t got[32][4];

static void run_warp(const std::function<void()> &k)
{
    cuk_emu_launch(dim3(1), dim3(32), k);
}

int main()
{
    for (int r = 0; r < 16; r++) {
        for (int k = 0; k < 16; k++)
            A[r][k] = (float)((r * 7 + k * 3) % 9 - 4);
        for (int n = 0; n < 8; n++) {
            B[r][n] = (float)((r * 5 + n * 11) % 7 - 3);
            Cm[r][n] = (float)(r - n);
        }
    }
    /* mma: registers by the layouts, product, D by the layout. */
    run_warp([] {
        int lane = (int)threadIdx.x;
        uint32_t a[4], b[2];
        float d[4];
        for (int j = 0; j < 4; j++)
            a[j] = cuk_bf16x2(A[a_row(lane, 2 * j)][a_col(lane, 2 * j)],
                              A[a_row(lane, 2 * j + 1)][a_col(lane, 2 * j + 1)]);
        for (int j = 0; j < 2; j++)
            b[j] = cuk_bf16x2(B[b_row(lane, 2 * j)][b_col(lane, 2 * j)],
                              B[b_row(lane, 2 * j + 1)][b_col(lane, 2 * j + 1)]);
        for (int i = 0; i < 4; i++)
            d[i] = Cm[c_row(lane, i)][c_col(lane, i)];
        cuk_mma_bf16(d, a, b);
        for (int i = 0; i < 4; i++)
            D[c_row(lane, i)][c_col(lane, i)] = d[i];
    });
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            float want = Cm[r][n];
            for (int k = 0; k < 16; k++)
                want += A[r][k] * B[k][n];
            expect("mma D = A B + C", r, n, D[r][n], want);
        }

    /* ldmatrix: tile[r][c] = 16 r + c (exact in bf16 below 256). */
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            tile[r][c] = __float2bfloat16_rn((float)(16 * r + c));
    /* Lanes 8m..8m+7: rows of quarter m = (rows 8 (m % 2), columns 8 (m / 2)). */
    auto quarter_row = [](int lane) {
        return &tile[lane % 8 + ((lane >> 3) & 1) * 8][(lane >> 4) * 8];
    };
    run_warp([&] { cuk_ldmatrix_x4(got[threadIdx.x], quarter_row((int)threadIdx.x), false); });
    for (int lane = 0; lane < 32; lane++)
        for (int j = 0; j < 4; j++) {
            expect("ldmatrix.x4 (A layout), low", lane, j, lo(got[lane][j]),
                   16 * a_row(lane, 2 * j) + a_col(lane, 2 * j));
            expect("ldmatrix.x4 (A layout), high", lane, j, hi(got[lane][j]),
                   16 * a_row(lane, 2 * j + 1) + a_col(lane, 2 * j + 1));
        }
    run_warp([&] { cuk_ldmatrix_x4(got[threadIdx.x], quarter_row((int)threadIdx.x), true); });
    for (int lane = 0; lane < 32; lane++)
        for (int m = 0; m < 4; m++) {
            int r0 = (m % 2) * 8, c0 = (m / 2) * 8, row = r0 + (lane % 4) * 2, col = c0 + (lane >> 2);
            expect("ldmatrix.x4.trans, low", lane, m, lo(got[lane][m]), 16 * row + col);
            expect("ldmatrix.x4.trans, high", lane, m, hi(got[lane][m]), 16 * (row + 1) + col);
        }

    /* cuk_c2a: accumulators of columns 0-7 and 8-15 (C layout) as A. */
    run_warp([] {
        int lane = (int)threadIdx.x;
        float c0[4], c1[4];
        for (int i = 0; i < 4; i++) {
            c0[i] = A[c_row(lane, i)][c_col(lane, i)];
            c1[i] = A[c_row(lane, i)][c_col(lane, i) + 8];
        }
        cuk_c2a(got[lane], c0, c1);
    });
    for (int lane = 0; lane < 32; lane++)
        for (int j = 0; j < 4; j++) {
            expect("cuk_c2a, low", lane, j, lo(got[lane][j]),
                   A[a_row(lane, 2 * j)][a_col(lane, 2 * j)]);
            expect("cuk_c2a, high", lane, j, hi(got[lane][j]),
                   A[a_row(lane, 2 * j + 1)][a_col(lane, 2 * j + 1)]);
        }

    std::printf("%s: the emulated mma.sync m16n8k16, ldmatrix .x4 and .x4.trans and cuk_c2a "
                "follow the PTX ISA's fragment layouts\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
