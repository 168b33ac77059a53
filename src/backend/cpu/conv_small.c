/* conv_small.c - direct convolution for few channels, with 16 images side by
 * side in the vector lanes.
 *
 * Why: LeNet's convolutions (1 -> 6 and 6 -> 16 channels, 5x5) are too narrow
 * for oneDNN's kernels, which put channels in the vector lanes in blocks of
 * 16: 6 channels fill 6 of 16 lanes, and its backward kernels ran at 60-70
 * GFLOP/s on a core that does ~190 (bench/roofline's profile), plus a reorder
 * of every padded tensor. Here the lanes hold 16 images instead, so every
 * multiply-add is full width whatever the channel counts, and each weight is
 * one scalar broadcast. cpu_conv_small_fits() says which shapes come here.
 *
 * A block of 16 images (lane l = image n0 + l; lanes past the batch are zero)
 * is transposed into these scratch tensors of the task's workspace:
 *   xt  [C][H + 2 pad][W + 2 pad][16]  input, zero-padded (plus a tail of
 *                                      zeros the forward tiles may read)
 *   yt  [F][OH][OWR][16]                output, OWR = OW rounded up to the tile
 *   dyt [F][OH][OW][16]                 output gradient (in yt's place)
 *   dxt [C][H][W][16]                   input gradient
 * and results are transposed back, 16 x 16 floats at a time (transpose.c),
 * to NCHW or, for the output, the blocked layout.
 *
 * Forward: PX output pixels of a row x FT output channels in registers, over
 * c, ky, kx: PX input vectors and FT broadcast weights feed PX*FT fmas.
 * Backward-weights: the K taps of a kernel row x FT output channels, over the
 * output pixels: K input vectors and FT gradient vectors feed K*FT fmas; the
 * lanes are summed at the end.
 * Backward-data: CT input channels of one input pixel, over the output pixels
 * that read it: one gradient vector and CT broadcast weights feed CT fmas.
 * The tile sizes are compile-time constants of one always-inlined function per
 * pass (a switch picks the instance), so the accumulators live in registers.
 *
 * Levels (cpu_isa.h, chosen per call from cpu_isa(), so TT_CPU_ISA caps
 * them): AVX-512 runs these tiles with 24 accumulators of 32 registers;
 * AVX2 + FMA runs smaller tiles (at most 12 accumulators of its 16
 * registers of 8 floats) on each half of the 16 lanes in turn, which keeps
 * the layout and every lane's order of operations, so its bits are
 * AVX-512's; plain C runs the same small tiles on 4-float vectors, each
 * quarter of the lanes in turn, without fma at the default -march (a
 * multiply and an add: other bits, the same bound). The 64-byte vector
 * type compiled for 16 registers (the old target_clones' AVX2 and default
 * clones) kept its vectors in memory: LeNet's convolutions ran at 2-4
 * GFLOP/s there, 30 times slower than these tiles.
 *
 * Precision "bf16" on a CPU with AVX512_BF16 (every bf16 CPU but in builds
 * without the AVX-512 kernels: sanitizers, clang) takes the vdpbf16ps
 * path below: the same tiles, each instruction two exact products of bf16
 * operands, rounded to nearest even as they are packed in pairs, added in
 * float32 (pairs of input channels or taps forward, of output pixels for
 * dw, of output channels for dx). On LeNet (towertrain profile, batch 128,
 * AMD EPYC Zen 5) conv1 (6 -> 16 channels) ran its forward 1.3-1.5x and
 * its backward 1.4-1.5x as fast as the float32 path; conv0 (one input
 * channel, bound by its transposes) the same as before. Its sums are not
 * bitwise the float32 fmas of the rounded operands (vdpbf16ps rounds a
 * pair's sum its own way and flushes denormals), but the same exact
 * products summed in float32: the same error bound (test_bf16's
 * check_sum_bound). Elsewhere bf16 rounds x, w and dy to bf16 and runs the
 * float32 tiles, which is exact for products of bf16 values. The tiles'
 * loop nests are written once (FWD_TILE_LOOPS...) for both paths.
 *
 * Bits: blocks are fixed groups of 16 images whatever the thread count; each
 * block writes its own partial dw and db (its lanes summed in lane order), and
 * the partials are summed in block order. Every sum has a fixed order.
 *
 * Workspace: per task (one per thread) xt + max(yt, dyt) + dxt (and on the
 * vdpbf16ps path the pairs xp, dyq, dyp); the weights rounded to bf16 (or
 * in pairs); then per block of the largest batch the partial dw
 * [F*C*K*K] and db [F].
 */
#include "backend/cpu/bf16_io.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/simd_target.h"

#include <stdint.h>
#include <string.h>

#include "backend/cpu/tile_gemm.h"
#include "backend/cpu/transpose.h"
#include "backend/math.h"

#ifdef CPU_AVX512_KERNELS
#include <immintrin.h>
#endif

/* a * b + c in one rounding inside this file's loops: -std=c11 keeps GCC
 * from fusing them otherwise (clang fuses within an expression already) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

/* The vector type is 64 bytes whatever the target: GCC warns that passing
 * one by value changes the ABI without AVX-512 (clang too). Every function taking one is
 * static inline in this file, so no ABI is crossed. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
/* and it takes the lanes {s} leaves zero for uninitialised (they are not:
 * C zeroes the rest of an initialiser) */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define LANES 16
typedef float v16 __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t vi16 __attribute__((vector_size(LANES * sizeof(int32_t))));
typedef uint32_t vu16 __attribute__((vector_size(LANES * sizeof(uint32_t))));

#define MAX_TILE 8 /* FT, PX, CT: at most 8 */
#define ACCS 24    /* accumulators per tile, of 32 vector registers */

/* One broadcast. GCC 12 is touchy here, measured on LeNet: {s, s, ...} is
 * built lane by lane (5x slower), {0} + s adds first (0.0f + s is no
 * identity for s = -0.0f), and a 4-float {s, s, s, s} shuffled or {0} with
 * v[0] = s are slower again; {s} shuffled is one vbroadcastss. */
static inline v16 splat(float s)
{
    v16 v = {s};
    return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

static inline v16 load16(const float *p)
{
    return *(const v16 *)p;
}

static inline void store16(float *p, v16 v)
{
    *(v16 *)p = v;
}

/* tt_relu on every lane, in registers: x where x > 0, else +0.0f (NaN
 * and -0.0f included, as tt_relu) */
static inline v16 relu16(v16 v)
{
    vi16 keep = v > splat(0.0f);
    return (v16)((vi16)v & keep);
}

/* Each lane rounded to bf16 (to nearest, ties to even), kept as a float. */
static inline v16 bf16_round16(v16 v)
{
    vu16 u = (vu16)v;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (v16)(u & 0xffff0000u);
}

CPU_HOT static void bf16_round(float *p, size_t n)
{
    for (size_t i = 0; i < n; i += LANES)
        store16(p + i, bf16_round16(load16(p + i)));
}

/* lanes summed in lane order */
static inline float hsum16(v16 v)
{
    float s = 0.0f;
    for (int l = 0; l < LANES; l++)
        s += v[l];
    return s;
}

bool cpu_conv_small_fits(const backend_t *be, const window_desc *d)
{
    return !d->blocked_x && d->stride == 1 && (d->k == 3 || d->k == 5) &&
           d->c < TT_BLOCK && d->f <= 2 * MAX_TILE && d->pad < d->k;
}

/* Whether this call takes the vdpbf16ps path: precision bf16 on a CPU
 * with AVX512_BF16, the kernels at AVX-512 (the CPU's features and
 * TT_CPU_ISA only, never timing, so runs stay bitwise repeatable); else
 * float32 fmas on bf16-rounded operands. */
static bool vdp_wanted(const backend_t *be, cpu_isa_t isa)
{
    return isa == CPU_ISA_AVX512 && ((const cpu_impl *)be->impl)->bf16 &&
           tile_gemm_bf16_supported();
}

/* ---- geometry ---- */

static size_t round_up16(size_t n)
{
    return (n + LANES - 1) / LANES * LANES;
}

typedef struct {
    const window_desc *d;
    cpu_isa_t isa;       /* the level whose tiles run (cpu_isa()) */
    int hp, wp;          /* padded input */
    int owr;             /* OW rounded up to every forward tile's pixels */
    size_t xt, yt, dxt;  /* floats of each scratch tensor */
    size_t task;         /* floats of one task's scratch */
    int blocks;          /* blocks of 16 images in d->n */
    tt_blocked_strides yst; /* of a blocked output: one block (d->f <= 16) */
    bool y_bf16;         /* a blocked output in bf16 (backend.h: blocked_bf16) */
    /* the vdpbf16ps path (precision bf16 on AVX512_BF16, vdp_wanted()):
     * pairs of bf16 operands in uint32s, after dxt in each task's scratch */
    bool vdp;
    bool fwd_kx;         /* forward pairs taps kx, kx + 1 (else channels) */
    int u, t;            /* forward: planes of pairs, pairs per kernel row */
    int ow2, f2;         /* ceil(OW / 2); ceil(F / 2) rounded up to even */
    size_t xp, dyq, dyp; /* uint32s of xp, dyq, dyp (vdp_pack_x, vdp_pack_dy) */
} geom;

/* The fewest tiles of at most `max` channels that hold n. */
static int tiles_of(int n, int max)
{
    return (n + max - 1) / max;
}

/* Those tiles as even as can be (16 -> 8 + 8, 6 -> 6, 10 -> 5 + 5): tile t
 * is channels [*lo, *hi). */
static void tile_range(int n, int max, int t, int *lo, int *hi)
{
    cpu_range(n, tiles_of(n, max), t, lo, hi);
}

/* The instances of each pass's tile, T(channels[, pixels]) for a switch
 * on the channels: forward (fwd_px's pixels), backward-weights for k = 3
 * and k = 5 (dw_ft_max), backward-data. */
#define FWD_TILES(T) T(1, 8) T(2, 8) T(3, 8) T(4, 6) T(5, 4) T(6, 4) T(7, 2) T(8, 2)
#define DW3_TILES(T) T(1, 3) T(2, 3) T(3, 3) T(4, 3) T(5, 3) T(6, 3) T(7, 3) T(8, 3)
#define DW5_TILES(T) T(1, 5) T(2, 5) T(3, 5) T(4, 5)
/* a switch on k and ft over those, CASE(FT, K) each */
#define DW_SWITCH(k, ft, CASE)                                                                \
    do {                                                                                      \
        if ((k) == 3)                                                                         \
            switch (ft) { DW3_TILES(CASE) }                                                   \
        else                                                                                  \
            switch (ft) { DW5_TILES(CASE) }                                                   \
    } while (0)
#define DX_TILES(T) T(1) T(2) T(3) T(4) T(5) T(6) T(7) T(8)

/* The tiles of 16 vector registers: AVX2's (8 floats) run each half of
 * the 16 lanes in turn, plain C's (4 floats: SSE2 at x86-64's baseline,
 * NEON) each quarter, at the same [..][16] strides, so the layout, the
 * transposes and every lane's order of operations stay the AVX-512
 * tiles' (AVX2: the same bits; each lane is one image's sum, and an fma
 * is an fma at any width). Accumulators at most 12, leaving registers for
 * the operands: forward PX * FT <= 12 with PX + 1 more live (channels at
 * most FWD2_MAX); backward-weights K * FT <= 12 with K + 1 more;
 * backward-data CT <= 8 with 2 more. */
#define FWD2_MAX 6
#define FWD2_TILES(T) T(1, 6) T(2, 4) T(3, 3) T(4, 3) T(5, 2) T(6, 2)
#define DW3_2_TILES(T) T(1, 3) T(2, 3) T(3, 3) T(4, 3)
#define DW5_2_TILES(T) T(1, 5) T(2, 5)
#define DW2_SWITCH(k, ft, CASE)                                                               \
    do {                                                                                      \
        if ((k) == 3)                                                                         \
            switch (ft) { DW3_2_TILES(CASE) }                                                 \
        else                                                                                  \
            switch (ft) { DW5_2_TILES(CASE) }                                                 \
    } while (0)

/* Pixels per forward tile for FT channels: PX * FT <= ACCS accumulators,
 * and PX input vectors + FT weights loaded per PX * FT fmas, which keeps
 * the fma units busier than the two load ports. The tile functions have these
 * as constants. */
static int fwd_px(cpu_isa_t isa, int ft)
{
#define FWD_PX(FT, PX) case FT: return PX;
    if (isa == CPU_ISA_AVX512)
        switch (ft) { FWD_TILES(FWD_PX) }
    else
        switch (ft) { FWD2_TILES(FWD_PX) }
#undef FWD_PX
    return 0;
}

/* The most output channels of a forward tile. */
static int fwd_ft_max(cpu_isa_t isa)
{
    return isa == CPU_ISA_AVX512 ? MAX_TILE : FWD2_MAX;
}

/* Channel tiles of backward-weights: at most ACCS / K (else 12 / K) for
 * the K accumulators of each. */
static int dw_ft_max(cpu_isa_t isa, int k)
{
    if (isa == CPU_ISA_AVX512)
        return k == 3 ? 8 : 4;
    return k == 3 ? 4 : 2;
}

static int gcd(int a, int b)
{
    return b == 0 ? a : gcd(b, a % b);
}

/* A multiple of every forward tile's pixel count (channel tiles come in at
 * most two sizes). */
static int fwd_px_lcm(const window_desc *d, cpu_isa_t isa)
{
    int l = 1;
    for (int t = 0; t < tiles_of(d->f, fwd_ft_max(isa)); t++) {
        int lo, hi;
        tile_range(d->f, fwd_ft_max(isa), t, &lo, &hi);
        int px = fwd_px(isa, hi - lo);
        l = l / gcd(l, px) * px;
    }
    return l;
}

static geom geom_of(const backend_t *be, const window_desc *d, cpu_isa_t isa)
{
    geom g = {.d = d, .isa = isa};
    g.hp = d->h + 2 * d->pad;
    g.wp = d->w + 2 * d->pad;
    int px = fwd_px_lcm(d, isa);
    g.owr = (d->ow + px - 1) / px * px;
    /* the last tile of a row reads up to owr - ow columns past it */
    g.xt = ((size_t)d->c * g.hp * g.wp + (size_t)(g.owr - d->ow) + 1) * LANES;
    size_t yt = (size_t)d->f * d->oh * g.owr * LANES;
    g.yt = (yt + LANES - 1) / LANES * LANES;
    g.dxt = (size_t)d->c * d->h * d->w * LANES;
    g.task = g.xt + g.yt + g.dxt;
    g.blocks = (d->n + LANES - 1) / LANES;
    g.yst = tt_blocked_strides_of(d->f, d->oh * d->ow, be->blocked_nhwc);
    g.y_bf16 = d->blocked_y && be->blocked_bf16;
    g.vdp = vdp_wanted(be, isa);
    if (g.vdp) {
        /* the forward's vdpbf16ps per output: C * K * ceil(K / 2) pairing
         * taps, ceil(C / 2) * K * K pairing channels (LeNet's conv0, C = 1:
         * 15 against 25; conv1, C = 6: 90 against 75) */
        int half_k = (d->k + 1) / 2, half_c = (d->c + 1) / 2;
        g.fwd_kx = d->c * half_k < half_c * d->k;
        g.u = g.fwd_kx ? d->c : half_c;
        g.t = g.fwd_kx ? half_k : d->k;
        g.ow2 = (d->ow + 1) / 2;
        g.f2 = (d->f + 3) / 4 * 2; /* pairs, even for dx_tile_vdp */
        g.xp = g.xt; /* either pairing fits in xt's shape */
        g.dyq = round_up16((size_t)d->f * d->oh * g.ow2 * LANES);
        g.dyp = round_up16((size_t)g.f2 * d->oh * d->ow * LANES);
        g.task += g.xp + g.dyq + g.dyp;
    }
    return g;
}

/* uint32s of the weights in pairs: the forward's w[F][U][K][T], then
 * backward-data's [F2][C][K][K] */
static size_t vdp_wf(const geom *g)
{
    return g->vdp ? round_up16((size_t)g->d->f * g->u * g->d->k * g->t) : 0;
}

static size_t vdp_wd(const geom *g)
{
    return g->vdp ? round_up16((size_t)g->f2 * g->d->c * g->d->k * g->d->k) : 0;
}

/* The workspace of a call at level `isa`. */
static size_t workspace_at(backend_t *be, const window_desc *d, cpu_isa_t isa)
{
    geom g = geom_of(be, d, isa);
    size_t fckk = (size_t)d->f * d->c * d->k * d->k;
    size_t partial = (size_t)g.blocks * (fckk + d->f);
    return ((size_t)be->threads * g.task + partial + round_up16(fckk) + vdp_wf(&g) + vdp_wd(&g)) *
           sizeof(float);
}

/* The most any level the CPU has needs (the tiles' row rounding differs),
 * so a workspace sized once fits whatever level a unit test then sets. */
size_t cpu_conv_small_workspace(backend_t *be, const window_desc *d)
{
    size_t most = 0;
    for (int l = CPU_ISA_PLAIN; l <= (int)cpu_isa_detected(); l++) {
        size_t n = workspace_at(be, d, (cpu_isa_t)l);
        most = n > most ? n : most;
    }
    return most;
}

/* ---- the transposes between NCHW (or blocked) and a block's lanes ---- */

/* A run of `len` floats of each image (at src + image * ld) into the lanes
 * of dst[len][16]; images past nb are zero. */
static void lanes_in(const float *src, size_t ld, int nb, int len, float *dst)
{
    for (int p = 0; p < len; p += LANES)
        cpu_transpose16(src + p, (ptrdiff_t)ld, nb, len - p < LANES ? len - p : LANES,
                        dst + (size_t)p * LANES, LANES, LANES);
}

/* The inverse: src[len][16] (row stride LANES) into a run of `len` floats of
 * each of the nb images. */
static void lanes_out(const float *src, int len, int nb, float *dst, size_t ld)
{
    for (int p = 0; p < len; p += LANES) {
        int rows = len - p < LANES ? len - p : LANES;
        cpu_transpose16(src + (size_t)p * LANES, LANES, rows, nb, dst + p, (ptrdiff_t)ld, rows);
    }
}

/* x of images [n0, n0 + nb) into xt, zero-padded; rounded to bf16 for
 * precision "bf16". */
static void x_in(const geom *g, const float *x, int n0, int nb, bool bf16, float *xt)
{
    const window_desc *d = g->d;
    size_t chw = (size_t)d->c * d->h * d->w;
    /* zeros where no pixel lands: the padding (all of xt, simplest) or, with
     * none, the tail past the last plane (every pixel's 16 lanes are stored,
     * zeros past nb) */
    size_t pixels = (size_t)d->c * g->hp * g->wp * LANES;
    if (d->pad > 0)
        memset(xt, 0, g->xt * sizeof(float));
    else
        memset(xt + pixels, 0, (g->xt - pixels) * sizeof(float));
    for (int c = 0; c < d->c; c++) {
        const float *plane = x + n0 * chw + (size_t)c * d->h * d->w;
        float *tp = xt + (size_t)c * g->hp * g->wp * LANES;
        if (d->pad == 0) {
            lanes_in(plane, chw, nb, d->h * d->w, tp);
            continue;
        }
        for (int iy = 0; iy < d->h; iy++)
            lanes_in(plane + (size_t)iy * d->w, chw, nb, d->w,
                     tp + ((size_t)(iy + d->pad) * g->wp + d->pad) * LANES);
    }
    if (bf16)
        bf16_round(xt, g->xt);
}

/* The floats of one image of the output (or its gradient) in its layout. */
static size_t out_image(const geom *g)
{
    const window_desc *d = g->d;
    return d->blocked_y ? g->yst.img : (size_t)d->f * d->oh * d->ow;
}

/* A blocked output pixel's transposed tile t[nb][16] into bf16 y at
 * element `at`, image by image (each run of 16 vectorises in y_out's
 * clones: bf16_from_float is branch-free). */
static inline void pixel_out_bf16(const geom *g, const float *t, int nb, uint16_t *y, size_t at)
{
    for (int i = 0; i < nb; i++)
        for (int l = 0; l < TT_BLOCK; l++)
            y[at + (size_t)i * g->yst.img + l] = bf16_from_float(t[(size_t)i * TT_BLOCK + l]);
}

/* yt (row stride owr) out to y, NCHW or blocked (one block: its F filters
 * of a pixel are the 16 values at the pixel's place, zeros past F; bf16
 * where g->y_bf16). */
CPU_HOT static void y_out(const geom *g, const float *yt, int n0, int nb, void *yv)
{
    const window_desc *d = g->d;
    size_t P = (size_t)d->oh * d->ow;
    if (d->blocked_y) {
        float t[LANES * TT_BLOCK] __attribute__((aligned(64)));
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                const float *src = yt + ((size_t)oy * g->owr + ox) * LANES;
                ptrdiff_t ld = (ptrdiff_t)d->oh * g->owr * LANES;
                size_t at = n0 * g->yst.img + ((size_t)oy * d->ow + ox) * g->yst.pstride;
                if (!g->y_bf16) {
                    cpu_transpose16(src, ld, d->f, nb, (float *)yv + at, (ptrdiff_t)g->yst.img,
                                    TT_BLOCK);
                    continue;
                }
                cpu_transpose16(src, ld, d->f, nb, t, TT_BLOCK, TT_BLOCK);
                pixel_out_bf16(g, t, nb, yv, at);
            }
        return;
    }
    float *y = yv;
    size_t fp = (size_t)d->f * P;
    for (int f = 0; f < d->f; f++) {
        float *dst = y + n0 * fp + (size_t)f * P;
        const float *src = yt + (size_t)f * d->oh * g->owr * LANES;
        if (g->owr == d->ow) {
            lanes_out(src, (int)P, nb, dst, fp);
            continue;
        }
        for (int oy = 0; oy < d->oh; oy++)
            lanes_out(src + (size_t)oy * g->owr * LANES, d->ow, nb, dst + (size_t)oy * d->ow, fp);
    }
}

CPU_HOT static void relu_mask(const void *y, size_t n, bool bf16, float *dy)
{
    if (bf16)
        for (size_t i = 0; i < n; i++)
            dy[i] = tt_relu_grad(bf16_to_float(((const uint16_t *)y)[i]), dy[i]);
    else
        for (size_t i = 0; i < n; i++)
            dy[i] = tt_relu_grad(((const float *)y)[i], dy[i]);
}

/* dy of images [n0, n0 + nb), masked by relu where the forward applied it
 * (in place, as conv.c does), into dyt[F][OH][OW][16]; rounded to bf16 for
 * precision "bf16". */
static void dy_in(const geom *g, const float *y, bool relu, float *dy, int n0, int nb,
                  bool bf16, float *dyt)
{
    const window_desc *d = g->d;
    size_t P = (size_t)d->oh * d->ow, img = out_image(g);
    if (relu)
        relu_mask(act_at(y, n0 * img, g->y_bf16), (size_t)nb * img, g->y_bf16, dy + n0 * img);
    if (!d->blocked_y) {
        for (int f = 0; f < d->f; f++)
            lanes_in(dy + n0 * img + (size_t)f * P, img, nb, (int)P, dyt + (size_t)f * P * LANES);
    } else {
        for (size_t p = 0; p < P; p++)
            cpu_transpose16(dy + n0 * img + p * g->yst.pstride, (ptrdiff_t)img, nb, d->f,
                            dyt + p * LANES, (ptrdiff_t)P * LANES, LANES);
    }
    if (bf16)
        bf16_round(dyt, (size_t)d->f * P * LANES);
}

/* ---- the tiles' loop nests ----
 *
 * Each pass's tile is written once, here, and instantiated for the float32
 * fma path (v16 operands of floats) and the vdpbf16ps path (__m512bh
 * operands of bf16 pairs in uint32s; the reduction then runs over pairs).
 * ACC, OPD: accumulator and operand vector types; E: operand element
 * type; LOAD(p): an operand vector; BCAST(p): an element of w broadcast;
 * MAC(acc, a, b): acc += a * b (pairwise for vdpbf16ps); SPLATF(s), ZERO:
 * accumulator vectors. They use the tile function's g, FT, PX, CT, K, f0,
 * c0 and its pointers by name. */

/* Forward: y = relu?(bias + sum over planes u < U, kernel rows ky and taps
 * t < T of w[f][u][ky][t] * x[u][oy + ky][ox + j + t * TS]), PX pixels of
 * a row x FT channels; OUT(p, acc) stores one vector (and applies relu). */
#define FWD_TILE_LOOPS(ACC, OPD, E, X, W, U, T, TS, LOAD, BCAST, MAC, SPLATF, OUT)            \
    do {                                                                                      \
        const window_desc *d = g->d;                                                          \
        int K = d->k;                                                                         \
        size_t plane = (size_t)g->hp * g->wp * LANES, ukt = (size_t)(U) * K * (T);            \
        for (int oy = 0; oy < d->oh; oy++)                                                    \
            for (int ox = 0; ox < g->owr; ox += PX) {                                         \
                ACC acc[MAX_TILE][MAX_TILE];                                                  \
                for (int j = 0; j < PX; j++)                                                  \
                    for (int f = 0; f < FT; f++)                                              \
                        acc[j][f] = SPLATF(b != NULL ? b[f0 + f] : 0.0f);                     \
                for (int u = 0; u < (U); u++)                                                 \
                    for (int ky = 0; ky < K; ky++) {                                          \
                        const E *xr = (X) + u * plane + ((size_t)(oy + ky) * g->wp + ox) * LANES; \
                        const E *wr = (W) + (size_t)f0 * ukt + ((size_t)u * K + ky) * (T);    \
                        for (int t = 0; t < (T); t++) {                                       \
                            OPD xv[MAX_TILE];                                                 \
                            for (int j = 0; j < PX; j++)                                      \
                                xv[j] = LOAD(xr + (size_t)(j + t * (TS)) * LANES);            \
                            for (int f = 0; f < FT; f++) {                                    \
                                OPD wv = BCAST(wr + f * ukt + t);                             \
                                for (int j = 0; j < PX; j++)                                  \
                                    MAC(acc[j][f], xv[j], wv);                                \
                            }                                                                 \
                        }                                                                     \
                    }                                                                         \
                for (int f = 0; f < FT; f++)                                                  \
                    for (int j = 0; j < PX; j++)                                              \
                        OUT(yt + (((size_t)(f0 + f) * d->oh + oy) * g->owr + ox + j) * LANES, \
                            acc[j][f]);                                                       \
            }                                                                                 \
    } while (0)

/* Backward-weights: the K taps of a kernel row x FT channels, summed over
 * NJ steps j of each output row (x at column XS * j + kx, dy at
 * DY[f][oy][j], rows NJ long); OUT(p, acc) sums the lanes into *p. */
#define DW_TILE_LOOPS(ACC, OPD, E, X, DY, NJ, XS, LOAD, MAC, ZERO, OUT)                       \
    do {                                                                                      \
        const window_desc *d = g->d;                                                          \
        size_t plane = (size_t)g->hp * g->wp * LANES, Q = (size_t)d->oh * (NJ);               \
        for (int c = 0; c < d->c; c++)                                                        \
            for (int ky = 0; ky < K; ky++) {                                                  \
                ACC acc[5][MAX_TILE];                                                         \
                for (int kx = 0; kx < K; kx++)                                                \
                    for (int f = 0; f < FT; f++)                                              \
                        acc[kx][f] = ZERO;                                                    \
                for (int oy = 0; oy < d->oh; oy++) {                                          \
                    const E *xr = (X) + c * plane + (size_t)(oy + ky) * g->wp * LANES;        \
                    const E *dr = (DY) + ((size_t)f0 * Q + (size_t)oy * (NJ)) * LANES;        \
                    for (int j = 0; j < (NJ); j++) {                                          \
                        OPD xv[5];                                                            \
                        for (int kx = 0; kx < K; kx++)                                        \
                            xv[kx] = LOAD(xr + (size_t)((XS) * j + kx) * LANES);              \
                        for (int f = 0; f < FT; f++) {                                        \
                            OPD dv = LOAD(dr + ((size_t)f * Q + j) * LANES);                  \
                            for (int kx = 0; kx < K; kx++)                                    \
                                MAC(acc[kx][f], xv[kx], dv);                                  \
                        }                                                                     \
                    }                                                                         \
                }                                                                             \
                for (int f = 0; f < FT; f++)                                                  \
                    for (int kx = 0; kx < K; kx++)                                            \
                        OUT(&pdw[(((size_t)(f0 + f) * d->c + c) * K + ky) * K + kx],          \
                            acc[kx][f]);                                                      \
            }                                                                                 \
    } while (0)

/* Backward-data: CT input channels of one input pixel at a time, over NF
 * output channels (or pairs) of DY and W[f][c][ky][kx], in CH chains
 * (channel f + h feeds chain h); OUT(p, c) stores channel c's sum. */
#define DX_TILE_LOOPS(ACC, OPD, E, W, DY, NF, CH, LOAD, BCAST, MAC, ZERO, OUT)                 \
    do {                                                                                      \
        const window_desc *d = g->d;                                                          \
        int K = d->k, pad = d->pad;                                                           \
        size_t kk = (size_t)K * K, ckk = (size_t)d->c * kk, P = (size_t)d->oh * d->ow;        \
        for (int iy = 0; iy < d->h; iy++) {                                                   \
            int ky0 = iy + pad - (d->oh - 1), ky1 = iy + pad;                                 \
            ky0 = ky0 < 0 ? 0 : ky0;                                                          \
            ky1 = ky1 > K - 1 ? K - 1 : ky1;                                                  \
            for (int ix = 0; ix < d->w; ix++) {                                               \
                int kx0 = ix + pad - (d->ow - 1), kx1 = ix + pad;                             \
                kx0 = kx0 < 0 ? 0 : kx0;                                                      \
                kx1 = kx1 > K - 1 ? K - 1 : kx1;                                              \
                ACC acc[CH][MAX_TILE];                                                        \
                for (int h = 0; h < (CH); h++)                                                \
                    for (int c = 0; c < CT; c++)                                              \
                        acc[h][c] = ZERO;                                                     \
                for (int f = 0; f < (NF); f += (CH))                                          \
                    for (int ky = ky0; ky <= ky1; ky++) {                                     \
                        const E *dr = (DY) + ((size_t)f * P + (size_t)(iy + pad - ky) * d->ow + \
                                              ix + pad) * LANES;                              \
                        const E *wr = (W) + (size_t)f * ckk + (size_t)c0 * kk + (size_t)ky * K; \
                        for (int kx = kx0; kx <= kx1; kx++)                                   \
                            for (int h = 0; h < (CH); h++) {                                  \
                                OPD dv = LOAD(dr + h * P * LANES - (size_t)kx * LANES);       \
                                for (int c = 0; c < CT; c++)                                  \
                                    MAC(acc[h][c], dv, BCAST(wr + h * ckk + c * kk + kx));    \
                            }                                                                 \
                    }                                                                         \
                for (int c = 0; c < CT; c++)                                                  \
                    OUT(dxt + (((size_t)(c0 + c) * d->h + iy) * d->w + ix) * LANES, c);       \
            }                                                                                 \
        }                                                                                     \
    } while (0)

/* the float32 path's operations */
#define FMA_MAC(acc, a, b) ((acc) += (a) * (b))
#define FMA_BCAST(p) splat(*(p))
#define FMA_ZERO splat(0.0f)
#define FMA_FWD_OUT(p, v) store16((p), relu ? relu16(v) : (v))
#define FMA_DW_OUT(p, v) (*(p) = hsum16(v))
#define FMA_DX_OUT(p, c) store16((p), acc[0][c])

/* the plain tiles' operations: 4 lanes, a quarter of a block's 16 at a
 * time (`quarter` 0 to 3 in the tile function) */
typedef float v4 __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t vi4 __attribute__((vector_size(4 * sizeof(int32_t))));
#define V4_INLINE __attribute__((always_inline)) static inline

V4_INLINE v4 splat4(float s)
{
    v4 v = {s};
    return __builtin_shufflevector(v, v, 0, 0, 0, 0);
}

V4_INLINE v4 load4(const float *p)
{
    return *(const v4 *)p;
}

V4_INLINE void store4(float *p, v4 v)
{
    *(v4 *)p = v;
}

V4_INLINE v4 relu4(v4 v)
{
    vi4 keep = v > splat4(0.0f);
    return (v4)((vi4)v & keep);
}

/* v's lanes added to s in lane order (quarter by quarter: hsum16's) */
V4_INLINE float hsum4(float s, v4 v)
{
    for (int l = 0; l < 4; l++)
        s += v[l];
    return s;
}

#define FMA4_BCAST(p) splat4(*(p))
#define FMA4_ZERO splat4(0.0f)
#define FMA4_FWD_OUT(p, v) store4((p), relu ? relu4(v) : (v))
#define FMA4_DW_OUT(p, v) (*(p) = hsum4(quarter ? *(p) : 0.0f, (v)))
#define FMA4_DX_OUT(p, c) store4((p), acc[0][c])

/* the AVX2 tiles' operations: 8 lanes, one half of a block's 16 at a time
 * (`half` 0 or 1 in the tile function) */
#ifdef X86_KERNELS
typedef float v8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t vi8 __attribute__((vector_size(8 * sizeof(int32_t))));
#define AVX2_INLINE TARGET_AVX2 __attribute__((always_inline)) static inline

AVX2_INLINE v8 splat8(float s)
{
    v8 v = {s};
    return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);
}

AVX2_INLINE v8 load8(const float *p)
{
    return *(const v8 *)p;
}

AVX2_INLINE void store8(float *p, v8 v)
{
    *(v8 *)p = v;
}

AVX2_INLINE v8 relu8(v8 v)
{
    vi8 keep = v > splat8(0.0f);
    return (v8)((vi8)v & keep);
}

/* v's lanes added to s in lane order: half 0 from 0.0f, then half 1 from
 * half 0's sum is hsum16's order */
AVX2_INLINE float hsum8(float s, v8 v)
{
    for (int l = 0; l < 8; l++)
        s += v[l];
    return s;
}

#define FMA8_BCAST(p) splat8(*(p))
#define FMA8_ZERO splat8(0.0f)
#define FMA8_FWD_OUT(p, v) store8((p), relu ? relu8(v) : (v))
#define FMA8_DW_OUT(p, v) (*(p) = hsum8(half ? *(p) : 0.0f, (v)))
#define FMA8_DX_OUT(p, c) store8((p), acc[0][c])
#endif

/* ---- forward ---- */

/* Output channels [f0, f0 + FT) of every pixel of the block, PX pixels of a
 * row at a time: y = relu?(bias + sum over c, ky, kx of w * x). */
static inline __attribute__((always_inline)) void fwd_tile(const geom *g, const float *w,
                                                           const float *b, bool relu,
                                                           const float *xt, float *yt, int f0,
                                                           const int FT, const int PX)
{
    FWD_TILE_LOOPS(v16, v16, float, xt, w, g->d->c, g->d->k, 1, load16, FMA_BCAST, FMA_MAC, splat,
                   FMA_FWD_OUT);
}

/* The channel tile [f0, f0 + ft), fwd_px(ft) pixels at a time: the
 * instances, compiled for AVX-512 below. */
static inline __attribute__((always_inline)) void fwd_channels16(const geom *g, const float *w,
                                                                 const float *b, bool relu,
                                                                 const float *xt, float *yt,
                                                                 int f0, int ft)
{
#define FWD_CASE(FT, PX)                                                                      \
    case FT: fwd_tile(g, w, b, relu, xt, yt, f0, FT, PX); break;
    switch (ft) { FWD_TILES(FWD_CASE) }
#undef FWD_CASE
}

/* fwd_tile on the 4 lanes of xt and yt (a quarter's first lane). */
V4_INLINE void fwd_tile4(const geom *g, const float *w, const float *b, bool relu,
                         const float *xt, float *yt, int f0, const int FT, const int PX)
{
    FWD_TILE_LOOPS(v4, v4, float, xt, w, g->d->c, g->d->k, 1, load4, FMA4_BCAST, FMA_MAC, splat4,
                   FMA4_FWD_OUT);
}

static void fwd_channels_plain(const geom *g, const float *w, const float *b, bool relu,
                               const float *xt, float *yt, int f0, int ft)
{
    for (int quarter = 0; quarter < 4; quarter++) {
        const float *xq = xt + 4 * quarter;
        float *yq = yt + 4 * quarter;
#define FWD_CASE(FT, PX)                                                                      \
    case FT: fwd_tile4(g, w, b, relu, xq, yq, f0, FT, PX); break;
        switch (ft) { FWD2_TILES(FWD_CASE) }
#undef FWD_CASE
    }
}

#ifdef X86_KERNELS
TARGET_AVX512 static void fwd_channels_avx512(const geom *g, const float *w, const float *b,
                                              bool relu, const float *xt, float *yt, int f0,
                                              int ft)
{
    fwd_channels16(g, w, b, relu, xt, yt, f0, ft);
}

/* fwd_tile on the 8 lanes of xt and yt (a half's first lane). */
AVX2_INLINE void fwd_tile8(const geom *g, const float *w, const float *b, bool relu,
                           const float *xt, float *yt, int f0, const int FT, const int PX)
{
    FWD_TILE_LOOPS(v8, v8, float, xt, w, g->d->c, g->d->k, 1, load8, FMA8_BCAST, FMA_MAC, splat8,
                   FMA8_FWD_OUT);
}

TARGET_AVX2 static void fwd_channels_avx2(const geom *g, const float *w, const float *b,
                                          bool relu, const float *xt, float *yt, int f0, int ft)
{
    for (int half = 0; half < 2; half++) {
        const float *xh = xt + 8 * half;
        float *yh = yt + 8 * half;
#define FWD_CASE(FT, PX)                                                                      \
    case FT: fwd_tile8(g, w, b, relu, xh, yh, f0, FT, PX); break;
        switch (ft) { FWD2_TILES(FWD_CASE) }
#undef FWD_CASE
    }
}
#endif

/* ---- the vdpbf16ps path (g->vdp) ----
 *
 * _mm512_dpbf16_ps(acc, a, b): lane l of a and b holds a pair of bf16
 * (low 16 bits, high 16 bits) and acc[l] += a.lo * b.lo + a.hi * b.hi, two
 * exact products added in float32, input and output denormals flushed to
 * zero: twice the multiply-adds of an fma per instruction. Lane l is still
 * image n0 + l; the pair runs along a reduction index of the pass:
 *   forward          input channels (2cc, 2cc + 1), the last alone with a
 *                    zero partner; or, where that takes fewer instructions
 *                    (one channel: LeNet's conv0), taps (kx, kx + 1) of a
 *                    kernel row, the last with a zero weight
 *   backward-weights output pixels (ox, ox + 1) of a row, the last of an
 *                    odd row with a zero dy
 *   backward-data    output channels (2ff, 2ff + 1), the last with a zero
 *                    partner
 * Operand pairs are packed per block from the float32 transposes
 * (vcvtne2ps2bf16: nearest even, as bf16_round16), the weights' once per
 * call. The sums keep a fixed order (pair by pair, as the fma path's), so
 * the bits still do not depend on the thread count. Pairing taps or
 * pixels puts a neighbouring x beside a zero (weight or dy): an infinite
 * x there gives NaN (Inf * 0) where the fma path keeps it to its own
 * outputs; a run with an infinite activation has diverged anyway. */

/* pairs of two floats, each rounded to bf16 to nearest even: the low half
 * `lo`, the high half `hi` (what bf16_round16 would give; denormals
 * become zero, as vdpbf16ps would make of them) */
static uint32_t pair_of(float lo, float hi)
{
    return (uint32_t)bf16_from_float(lo) | (uint32_t)bf16_from_float(hi) << 16;
}

/* w[f][c][ky][kx] (or 0 past the range) */
static float w_at(const window_desc *d, const float *w, int f, int c, int ky, int kx)
{
    if (f >= d->f || c >= d->c || kx >= d->k)
        return 0.0f;
    return w[(((size_t)f * d->c + c) * d->k + ky) * d->k + kx];
}

/* The forward's weights wf[F][U][K][T] (pairs of channels or of taps) and
 * backward-data's wd[F2][C][K][K] (pairs of output channels, zero past F). */
static void vdp_pack_w(const geom *g, const float *w, uint32_t *wf, uint32_t *wd)
{
    const window_desc *d = g->d;
    int K = d->k;
    for (int f = 0; f < d->f; f++)
        for (int u = 0; u < g->u; u++)
            for (int ky = 0; ky < K; ky++)
                for (int t = 0; t < g->t; t++) {
                    int c = g->fwd_kx ? u : 2 * u, kx = g->fwd_kx ? 2 * t : t;
                    float lo = w_at(d, w, f, c, ky, kx);
                    float hi = g->fwd_kx ? w_at(d, w, f, c, ky, kx + 1) : w_at(d, w, f, c + 1, ky, kx);
                    wf[(((size_t)f * g->u + u) * K + ky) * g->t + t] = pair_of(lo, hi);
                }
    for (int f2 = 0; f2 < g->f2; f2++)
        for (int c = 0; c < d->c; c++)
            for (int ky = 0; ky < K; ky++)
                for (int kx = 0; kx < K; kx++)
                    wd[(((size_t)f2 * d->c + c) * K + ky) * K + kx] =
                        pair_of(w_at(d, w, 2 * f2, c, ky, kx), w_at(d, w, 2 * f2 + 1, c, ky, kx));
}

#ifdef CPU_AVX512_KERNELS
#define VDP_TARGET "avx512f,avx512bw,avx512bf16"
#define VDP_INLINE __attribute__((target(VDP_TARGET), always_inline)) static inline

/* out[i][l] = the pair (a[i * step][l], b[i * step][l]) for i < n, vectors
 * of 16 floats; b NULL: zero partners. */
__attribute__((target(VDP_TARGET))) static void vdp_pairs(const float *a, const float *b,
                                                           size_t step, size_t n, uint32_t *out)
{
    static const uint16_t order[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                       15, 31};
    __m512i inter = _mm512_loadu_si512(order);
    for (size_t i = 0; i < n; i++) {
        __m512 lo = _mm512_load_ps(a + i * step * LANES);
        __m512 hi = b != NULL ? _mm512_load_ps(b + i * step * LANES) : _mm512_setzero_ps();
        __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        _mm512_store_si512(out + i * LANES, _mm512_permutexvar_epi16(inter, both));
    }
}

/* x's pairs for the block, from xt: xp[u][hp][wp][16] pairs of channels
 * (2u, 2u + 1) for the forward, or, with `along` (the forward pairing taps,
 * and backward-weights), xp[c][hp][wp][16] pairs of pixels (p, p + 1) of
 * xt taken as one row (the partner of a row's last pixel is the next
 * row's first: it meets a zero weight or dy). The tail of zeros past the
 * last plane comes along. */
static void vdp_pack_x(const geom *g, const float *xt, bool along, uint32_t *xp)
{
    const window_desc *d = g->d;
    size_t vecs = g->xt / LANES, plane = (size_t)g->hp * g->wp;
    if (along) {
        vdp_pairs(xt, xt + LANES, 1, vecs - 1, xp);
        vdp_pairs(xt + (vecs - 1) * LANES, NULL, 1, 1, xp + (vecs - 1) * LANES);
        return;
    }
    for (int u = 0; u < g->u; u++) {
        const float *lo = xt + 2 * u * plane * LANES;
        vdp_pairs(lo, 2 * u + 1 < d->c ? lo + plane * LANES : NULL, 1, plane,
                  xp + u * plane * LANES);
    }
    size_t done = (size_t)g->u * plane;
    memset(xp + done * LANES, 0, (vecs - done) * LANES * sizeof(uint32_t));
}

/* dy's pairs for the block, from dyt[F][OH][OW][16]: dyq[F][OH][OW2][16]
 * pairs of pixels (ox, ox + 1) for backward-weights, when asked, and
 * dyp[F2][OH][OW][16] pairs of channels (2ff, 2ff + 1) for backward-data
 * (F2 = g->f2: zero pairs past F). */
static void vdp_pack_dy(const geom *g, const float *dyt, uint32_t *dyq, uint32_t *dyp)
{
    const window_desc *d = g->d;
    size_t P = (size_t)d->oh * d->ow;
    for (int f = 0; dyq != NULL && f < d->f; f++)
        for (int oy = 0; oy < d->oh; oy++) {
            const float *row = dyt + ((size_t)f * P + (size_t)oy * d->ow) * LANES;
            uint32_t *out = dyq + ((size_t)f * d->oh + oy) * g->ow2 * LANES;
            vdp_pairs(row, row + LANES, 2, (size_t)d->ow / 2, out);
            if (d->ow % 2)
                vdp_pairs(row + (size_t)(d->ow - 1) * LANES, NULL, 1, 1,
                          out + (size_t)(d->ow / 2) * LANES);
        }
    for (int f2 = 0; dyp != NULL && f2 < g->f2; f2++) {
        const float *lo = dyt + (size_t)2 * f2 * P * LANES;
        if (2 * f2 >= d->f) /* the zero pair that makes the pairs even */
            memset(dyp + f2 * P * LANES, 0, P * LANES * sizeof(uint32_t));
        else
            vdp_pairs(lo, 2 * f2 + 1 < d->f ? lo + P * LANES : NULL, 1, P, dyp + f2 * P * LANES);
    }
}

VDP_INLINE __m512bh vdp_load(const uint32_t *p)
{
    return (__m512bh)_mm512_load_si512(p);
}

VDP_INLINE __m512bh vdp_splat(const uint32_t *p)
{
    return (__m512bh)_mm512_set1_epi32((int)*p);
}

#define VDP_MAC(acc, a, b) ((acc) = _mm512_dpbf16_ps((acc), (a), (b)))
/* relu: max(y, 0) picks 0 for NaN and -0, as tt_relu */
#define VDP_FWD_OUT(p, v) _mm512_store_ps((p), relu ? _mm512_max_ps((v), _mm512_setzero_ps()) : (v))
#define VDP_DW_OUT(p, v) (*(p) = vdp_hsum(v))
#define VDP_DX_OUT(p, c) _mm512_store_ps((p), _mm512_add_ps(acc[0][c], acc[1][c]))

/* lanes summed in lane order, as hsum16; a copy, not a call: hsum16 takes
 * its vector by value and is not built for AVX-512, and a call across that
 * boundary that GCC did not inline would change the ABI (clang refuses it) */
VDP_INLINE float vdp_hsum(__m512 v)
{
    float t[LANES] __attribute__((aligned(64)));
    _mm512_store_ps(t, v);
    float s = 0.0f;
    for (int l = 0; l < LANES; l++)
        s += t[l];
    return s;
}

/* fwd_tile over pairs: U planes of pairs, T pairs per kernel row, pair t
 * of a row at x column ox + j + t * ts (ts 1: channels; 2: taps). */
VDP_INLINE void fwd_tile_vdp(const geom *g, const uint32_t *wf, const float *b, bool relu,
                             const uint32_t *xp, float *yt, int f0, const int FT, const int PX)
{
    FWD_TILE_LOOPS(__m512, __m512bh, uint32_t, xp, wf, g->u, g->t, g->fwd_kx ? 2 : 1, vdp_load,
                   vdp_splat, VDP_MAC, _mm512_set1_ps, VDP_FWD_OUT);
}

__attribute__((target(VDP_TARGET))) static void fwd_channels_vdp(const geom *g,
                                                                 const uint32_t *wf,
                                                                 const float *b, bool relu,
                                                                 const uint32_t *xp, float *yt,
                                                                 int f0, int ft)
{
#define FWD_CASE(FT, PX)                                                                      \
    case FT: fwd_tile_vdp(g, wf, b, relu, xp, yt, f0, FT, PX); break;
    switch (ft) { FWD_TILES(FWD_CASE) }
#undef FWD_CASE
}

/* dw_tile over pairs of output pixels (ox, ox + 1): xq pairs of pixels
 * (vdp_pack_x along), dyq (vdp_pack_dy). */
VDP_INLINE void dw_tile_vdp(const geom *g, const uint32_t *xq, const uint32_t *dyq, float *pdw,
                            int f0, const int FT, const int K)
{
    DW_TILE_LOOPS(__m512, __m512bh, uint32_t, xq, dyq, g->ow2, 2, vdp_load, VDP_MAC,
                  _mm512_setzero_ps(), VDP_DW_OUT);
}

__attribute__((target(VDP_TARGET))) static void dw_channels_vdp(const geom *g, const uint32_t *xq,
                                                                const uint32_t *dyq, float *pdw,
                                                                int f0, int ft)
{
#define DW_CASE(FT, K) case FT: dw_tile_vdp(g, xq, dyq, pdw, f0, FT, K); break;
    DW_SWITCH(g->d->k, ft, DW_CASE);
#undef DW_CASE
}

/* dx_tile over pairs of output channels: wd and dyp (vdp_pack_w,
 * vdp_pack_dy). */
VDP_INLINE void dx_tile_vdp(const geom *g, const uint32_t *wd, const uint32_t *dyp, float *dxt,
                            int c0, const int CT)
{
    /* two chains per channel, even and odd f2, added at the end: CT
     * chains alone would wait on vdpbf16ps's latency */
    DX_TILE_LOOPS(__m512, __m512bh, uint32_t, wd, dyp, g->f2, 2, vdp_load, vdp_splat, VDP_MAC,
                  _mm512_setzero_ps(), VDP_DX_OUT);
}

__attribute__((target(VDP_TARGET))) static void dx_channels_vdp(const geom *g, const uint32_t *wd,
                                                                const uint32_t *dyp, float *dxt,
                                                                int c0, int ct)
{
#define DX_CASE(CT) case CT: dx_tile_vdp(g, wd, dyp, dxt, c0, CT); break;
    switch (ct) { DX_TILES(DX_CASE) }
#undef DX_CASE
}
#endif

/* one level's tiles of the three passes (level_of) */
typedef struct {
    void (*fwd)(const geom *g, const float *w, const float *b, bool relu, const float *xt,
                float *yt, int f0, int ft);
    void (*dw)(const geom *g, const float *xt, const float *dyt, float *pdw, int f0, int ft);
    void (*dx)(const geom *g, const float *w, const float *dyt, float *dxt, int c0, int ct);
} small_level;

static const small_level *level_of(cpu_isa_t isa);

typedef struct {
    geom g;
    const small_level *lv; /* g.isa's tiles */
    const float *x, *w, *b, *y;
    float *yo, *dy, *dx, *dw, *db;
    bool relu;
    bool bf16;        /* precision "bf16": x, w and dy rounded to bf16 */
    float *ws;
    float *pdw, *pdb; /* [blocks][F*C*K*K], [blocks][F] */
    uint32_t *wf, *wd; /* g.vdp: the weights in bf16 pairs (vdp_pack_w) */
} small_args;

/* The arguments of a call: past the tasks' scratch, the workspace holds
 * the weights rounded to bf16 (for bf16; a->w then points there) and the
 * blocks' partials. */
static void args_init(backend_t *be, const window_desc *d, small_args *a)
{
    size_t fckk = (size_t)d->f * d->c * d->k * d->k;
    a->g = geom_of(be, d, cpu_isa());
    a->lv = level_of(a->g.isa);
    float *wr = a->ws + (size_t)be->threads * a->g.task;
    a->bf16 = ((cpu_impl *)be->impl)->bf16;
    a->wf = (uint32_t *)(wr + round_up16(fckk));
    a->wd = a->wf + vdp_wf(&a->g);
    a->pdw = (float *)(a->wd + vdp_wd(&a->g));
    a->pdb = a->pdw + (size_t)a->g.blocks * fckk;
    if (a->g.vdp) {
        vdp_pack_w(&a->g, a->w, a->wf, a->wd);
    } else if (a->bf16) {
        memcpy(wr, a->w, fckk * sizeof(float));
        memset(wr + fckk, 0, (round_up16(fckk) - fckk) * sizeof(float));
        bf16_round(wr, round_up16(fckk));
        a->w = wr;
    }
}

#ifdef CPU_AVX512_KERNELS
/* A task's pair buffers (g->vdp), past its float32 scratch xt: xp, then
 * dyq, then dyp. */
static uint32_t *vdp_scratch(const geom *g, float *xt)
{
    return (uint32_t *)(xt + g->xt + g->yt + g->dxt);
}
#endif

static void forward_task(void *p, int k, int tasks)
{
    small_args *a = p;
    const geom *g = &a->g;
    const window_desc *d = g->d;
    float *xt = a->ws + (size_t)k * g->task, *yt = xt + g->xt;
    int lo, hi;
    cpu_range(g->blocks, tasks, k, &lo, &hi);
#ifdef CPU_AVX512_KERNELS
    uint32_t *xp = vdp_scratch(g, xt);
#endif
    for (int blk = lo; blk < hi; blk++) {
        int n0 = blk * LANES, nb = d->n - n0 < LANES ? d->n - n0 : LANES;
        x_in(g, a->x, n0, nb, a->bf16 && !g->vdp, xt);
#ifdef CPU_AVX512_KERNELS
        if (g->vdp)
            vdp_pack_x(g, xt, g->fwd_kx, xp);
#endif
        for (int t = 0; t < tiles_of(d->f, fwd_ft_max(g->isa)); t++) {
            int f0, f1;
            tile_range(d->f, fwd_ft_max(g->isa), t, &f0, &f1);
#ifdef CPU_AVX512_KERNELS
            if (g->vdp) {
                fwd_channels_vdp(g, a->wf, a->b, a->relu, xp, yt, f0, f1 - f0);
                continue;
            }
#endif
            a->lv->fwd(g, a->w, a->b, a->relu, xt, yt, f0, f1 - f0);
        }
        y_out(g, yt, n0, nb, a->yo);
    }
}

void cpu_conv_small_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                            const float *b, bool relu, float *y, void *ws)
{
    small_args a = {.x = x, .w = w, .b = b, .yo = y, .relu = relu, .ws = ws};
    args_init(be, d, &a);
    cpu_run(be, be->threads, forward_task, &a);
}

/* ---- backward ---- */

/* The weight gradient of output channels [f0, f0 + FT), all K taps of a
 * kernel row at once, summed over the block's pixels and then its lanes. */
static inline __attribute__((always_inline)) void dw_tile(const geom *g, const float *xt,
                                                          const float *dyt, float *pdw, int f0,
                                                          const int FT, const int K)
{
    DW_TILE_LOOPS(v16, v16, float, xt, dyt, g->d->ow, 1, load16, FMA_MAC, FMA_ZERO, FMA_DW_OUT);
}

static inline __attribute__((always_inline)) void dw_channels16(const geom *g, const float *xt,
                                                                const float *dyt, float *pdw,
                                                                int f0, int ft)
{
#define DW_CASE(FT, K) case FT: dw_tile(g, xt, dyt, pdw, f0, FT, K); break;
    DW_SWITCH(g->d->k, ft, DW_CASE);
#undef DW_CASE
}

/* dw_tile on the 4 lanes of xt and dyt; quarters 1 to 3 add their lanes
 * to the sums before them, in lane order. */
V4_INLINE void dw_tile4(const geom *g, const float *xt, const float *dyt, float *pdw, int f0,
                        int quarter, const int FT, const int K)
{
    DW_TILE_LOOPS(v4, v4, float, xt, dyt, g->d->ow, 1, load4, FMA_MAC, FMA4_ZERO, FMA4_DW_OUT);
}

static void dw_channels_plain(const geom *g, const float *xt, const float *dyt, float *pdw,
                              int f0, int ft)
{
    for (int quarter = 0; quarter < 4; quarter++) {
        const float *xq = xt + 4 * quarter, *dq = dyt + 4 * quarter;
#define DW_CASE(FT, K) case FT: dw_tile4(g, xq, dq, pdw, f0, quarter, FT, K); break;
        DW2_SWITCH(g->d->k, ft, DW_CASE);
#undef DW_CASE
    }
}

#ifdef X86_KERNELS
TARGET_AVX512 static void dw_channels_avx512(const geom *g, const float *xt, const float *dyt,
                                             float *pdw, int f0, int ft)
{
    dw_channels16(g, xt, dyt, pdw, f0, ft);
}

/* dw_tile on the 8 lanes of xt and dyt; half 1 adds its lanes to half 0's
 * sums, in lane order. */
AVX2_INLINE void dw_tile8(const geom *g, const float *xt, const float *dyt, float *pdw, int f0,
                          int half, const int FT, const int K)
{
    DW_TILE_LOOPS(v8, v8, float, xt, dyt, g->d->ow, 1, load8, FMA_MAC, FMA8_ZERO, FMA8_DW_OUT);
}

TARGET_AVX2 static void dw_channels_avx2(const geom *g, const float *xt, const float *dyt,
                                         float *pdw, int f0, int ft)
{
    for (int half = 0; half < 2; half++) {
        const float *xh = xt + 8 * half, *dh = dyt + 8 * half;
#define DW_CASE(FT, K) case FT: dw_tile8(g, xh, dh, pdw, f0, half, FT, K); break;
        DW2_SWITCH(g->d->k, ft, DW_CASE);
#undef DW_CASE
    }
}
#endif

/* The bias gradient: each channel's vectors summed over the pixels, then
 * the lanes. */
CPU_HOT static void db_block(const geom *g, const float *dyt, float *pdb)
{
    const window_desc *d = g->d;
    size_t P = (size_t)d->oh * d->ow;
    for (int f = 0; f < d->f; f++) {
        v16 s = splat(0.0f);
        for (size_t p = 0; p < P; p++)
            s += load16(dyt + ((size_t)f * P + p) * LANES);
        pdb[f] = hsum16(s);
    }
}

/* The input gradient of channels [c0, c0 + CT), one input pixel at a time:
 * dx[c][iy][ix] = sum over f and the taps (ky, kx) whose output pixel
 * (iy + pad - ky, ix + pad - kx) exists of w[f][c][ky][kx] * dy there. */
static inline __attribute__((always_inline)) void dx_tile(const geom *g, const float *w,
                                                          const float *dyt, float *dxt, int c0,
                                                          const int CT)
{
    DX_TILE_LOOPS(v16, v16, float, w, dyt, g->d->f, 1, load16, FMA_BCAST, FMA_MAC, FMA_ZERO,
                  FMA_DX_OUT);
}

static inline __attribute__((always_inline)) void dx_channels16(const geom *g, const float *w,
                                                                const float *dyt, float *dxt,
                                                                int c0, int ct)
{
#define DX_CASE(CT) case CT: dx_tile(g, w, dyt, dxt, c0, CT); break;
    switch (ct) { DX_TILES(DX_CASE) }
#undef DX_CASE
}

/* dx_tile on the 4 lanes of dyt and dxt. */
V4_INLINE void dx_tile4(const geom *g, const float *w, const float *dyt, float *dxt, int c0,
                        const int CT)
{
    DX_TILE_LOOPS(v4, v4, float, w, dyt, g->d->f, 1, load4, FMA4_BCAST, FMA_MAC, FMA4_ZERO,
                  FMA4_DX_OUT);
}

static void dx_channels_plain(const geom *g, const float *w, const float *dyt, float *dxt,
                              int c0, int ct)
{
    for (int quarter = 0; quarter < 4; quarter++) {
        const float *dq = dyt + 4 * quarter;
        float *xq = dxt + 4 * quarter;
#define DX_CASE(CT) case CT: dx_tile4(g, w, dq, xq, c0, CT); break;
        switch (ct) { DX_TILES(DX_CASE) }
#undef DX_CASE
    }
}

#ifdef X86_KERNELS
TARGET_AVX512 static void dx_channels_avx512(const geom *g, const float *w, const float *dyt,
                                             float *dxt, int c0, int ct)
{
    dx_channels16(g, w, dyt, dxt, c0, ct);
}

/* dx_tile on the 8 lanes of dyt and dxt. */
AVX2_INLINE void dx_tile8(const geom *g, const float *w, const float *dyt, float *dxt, int c0,
                          const int CT)
{
    DX_TILE_LOOPS(v8, v8, float, w, dyt, g->d->f, 1, load8, FMA8_BCAST, FMA_MAC, FMA8_ZERO,
                  FMA8_DX_OUT);
}

TARGET_AVX2 static void dx_channels_avx2(const geom *g, const float *w, const float *dyt,
                                         float *dxt, int c0, int ct)
{
    for (int half = 0; half < 2; half++) {
        const float *dh = dyt + 8 * half;
        float *xh = dxt + 8 * half;
#define DX_CASE(CT) case CT: dx_tile8(g, w, dh, xh, c0, CT); break;
        switch (ct) { DX_TILES(DX_CASE) }
#undef DX_CASE
    }
}
#endif

/* The level's tile functions, for the channel tiles [f0, f0 + ft) and
 * [c0, c0 + ct) (g->isa: plain where no X86_KERNELS). */
static const small_level *level_of(cpu_isa_t isa)
{
    static const small_level plain = {fwd_channels_plain, dw_channels_plain, dx_channels_plain};
#ifdef X86_KERNELS
    static const small_level avx512 = {fwd_channels_avx512, dw_channels_avx512,
                                       dx_channels_avx512};
    static const small_level avx2 = {fwd_channels_avx2, dw_channels_avx2, dx_channels_avx2};
    if (isa == CPU_ISA_AVX512)
        return &avx512;
    if (isa == CPU_ISA_AVX2)
        return &avx2;
#endif
    return &plain;
}

static void backward_task(void *p, int k, int tasks)
{
    small_args *a = p;
    const geom *g = &a->g;
    const window_desc *d = g->d;
    float *xt = a->ws + (size_t)k * g->task, *dyt = xt + g->xt, *dxt = dyt + g->yt;
    size_t fckk = (size_t)d->f * d->c * d->k * d->k;
    int lo, hi;
    cpu_range(g->blocks, tasks, k, &lo, &hi);
#ifdef CPU_AVX512_KERNELS
    uint32_t *xq = vdp_scratch(g, xt), *dyq = xq + g->xp, *dyp = dyq + g->dyq;
#endif
    for (int blk = lo; blk < hi; blk++) {
        int n0 = blk * LANES, nb = d->n - n0 < LANES ? d->n - n0 : LANES;
        /* dy rounded to bf16 in both paths: db sums it */
        dy_in(g, a->y, a->relu, a->dy, n0, nb, a->bf16, dyt);
#ifdef CPU_AVX512_KERNELS
        if (g->vdp)
            vdp_pack_dy(g, dyt, a->dw != NULL ? dyq : NULL, a->dx != NULL ? dyp : NULL);
#endif
        if (a->dw != NULL) {
            x_in(g, a->x, n0, nb, a->bf16 && !g->vdp, xt);
#ifdef CPU_AVX512_KERNELS
            if (g->vdp)
                vdp_pack_x(g, xt, true, xq);
#endif
            for (int t = 0; t < tiles_of(d->f, dw_ft_max(g->isa, d->k)); t++) {
                int f0, f1;
                tile_range(d->f, dw_ft_max(g->isa, d->k), t, &f0, &f1);
#ifdef CPU_AVX512_KERNELS
                if (g->vdp) {
                    dw_channels_vdp(g, xq, dyq, a->pdw + blk * fckk, f0, f1 - f0);
                    continue;
                }
#endif
                a->lv->dw(g, xt, dyt, a->pdw + blk * fckk, f0, f1 - f0);
            }
        }
        if (a->db != NULL)
            db_block(g, dyt, a->pdb + (size_t)blk * d->f);
        if (a->dx != NULL) {
            for (int t = 0; t < tiles_of(d->c, MAX_TILE); t++) {
                int c0, c1;
                tile_range(d->c, MAX_TILE, t, &c0, &c1);
#ifdef CPU_AVX512_KERNELS
                if (g->vdp) {
                    dx_channels_vdp(g, a->wd, dyp, dxt, c0, c1 - c0);
                    continue;
                }
#endif
                a->lv->dx(g, a->w, dyt, dxt, c0, c1 - c0);
            }
            size_t chw = (size_t)d->c * d->h * d->w;
            for (int c = 0; c < d->c; c++)
                lanes_out(dxt + (size_t)c * d->h * d->w * LANES, d->h * d->w, nb,
                          a->dx + n0 * chw + (size_t)c * d->h * d->w, chw);
        }
    }
}

/* dw and db: the blocks' partials summed in block order, split by element. */
static void reduce_task(void *p, int k, int tasks)
{
    small_args *a = p;
    const window_desc *d = a->g.d;
    int blocks = a->g.blocks;
    size_t fckk = (size_t)d->f * d->c * d->k * d->k;
    int lo, hi;
    cpu_range((int)fckk, tasks, k, &lo, &hi);
    if (a->dw != NULL)
        for (int i = lo; i < hi; i++)
            a->dw[i] = cpu_sum_in_order(a->pdw + i, blocks, fckk);
    cpu_range(d->f, tasks, k, &lo, &hi);
    if (a->db != NULL)
        for (int f = lo; f < hi; f++)
            a->db[f] = cpu_sum_in_order(a->pdb + f, blocks, (size_t)d->f);
}

void cpu_conv_small_backward(backend_t *be, const window_desc *d, const float *x,
                             const float *w, const float *y, bool relu, float *dy, float *dx,
                             float *dw, float *db, void *ws)
{
    small_args a = {.x = x, .w = w, .y = y, .dy = dy, .dx = dx, .dw = dw, .db = db,
                    .relu = relu, .ws = ws};
    args_init(be, d, &a);
    cpu_run(be, be->threads, backward_task, &a);
    if (dw != NULL || db != NULL)
        cpu_run(be, be->threads, reduce_task, &a);
}
