/** \file redfuse_simd_gemm_nn.h
 * Hot-loop primitives for generated CPU kernels, third of seven texts: the NN GEMMs C += P V (attention's
 * P·V, V with its N dimension contiguous) over the outer-product core, blocking and scratch of
 * redfuse_simd_gemm.h, pasted right after it (see the order of the seven texts in redfuse_simd.h).
 */
#ifndef REDFUSE_SIMD_GEMM_NN_H
#define REDFUSE_SIMD_GEMM_NN_H

#ifndef REDFUSE_SIMD_GEMM_H
#error "redfuse_simd_gemm_nn.h is pasted after redfuse_simd_gemm.h (its outer-product core and blocking)"
#endif

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (as in redfuse_simd.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace rfk {
namespace simd_detail {

#if defined(RFK_SIMD_VECTOR)

// NN accumulate. With several MR-row strips of P, each KC x W panel of V (N contiguous) is copied into
// a contiguous panel first (bf16 widened once, the N tail zero-padded) and every strip runs over it:
// read in place, a panel's rows lie ldv apart, and at ldv = 128 floats (attention's D = 128) only 2 of
// every 8 L1 sets hold its 256 rows x 2 lines (at 64, half of them), so the 32 KiB panel does not stay
// in L1 and each strip reads it again from L2 (attention f32 P·V, M = 128, N = 128, K = 256, one core
// of an AMX Xeon: 141 -> 165 GFLOP/s; D = 64: 139 -> 163; the copy is one strip's reads). A single
// strip (decode: V streamed once from memory) reads V in place, bf16 widened as it is loaded, and only
// the N tail is packed. Few rows take a wider block, which keeps enough independent FMA chains in flight.
template <int MR, int NV, typename TV>
static inline void nn_acc(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const TV *V, int64_t ldv,
                          float *C, int64_t ldc) {
    constexpr int W = NV * VW;
    for (int64_t pc = 0; pc < K; pc += kKC) {
        int64_t kc = min64(kKC, K - pc), in_place = M > MR ? 0 : N / W * W;
        if (in_place > 0) outer_block<MR, NV, TV>(M, in_place, kc, P + pc, ldp, V + pc * ldv, ldv, W, C, ldc, 1.0f, true);
        float *panel = in_place < N ? static_cast<float *>(scratch(0, size_t(kc * W) * sizeof(float))) : nullptr;
        for (int64_t j = in_place; j < N; j += W) {
            pack_rows<NV>(V + pc * ldv + j, ldv, kc, min64(W, N - j), panel);
            outer_block<MR, NV, float>(M, min64(W, N - j), kc, P + pc, ldp, panel, W, 0, C + j, ldc, 1.0f, true);
        }
    }
}
// nn_acc for V an input of the kernel, in rows of A past one register block (attention's P.V): V's
// panels, all of them, kept for the thread's next call on the same V in this kernel entry (as
// nt_kept_panels). The same packing and blocks as nn_acc. False: a shape nn_acc reads V in place. A
// bf16 V is kept widened, from kPackMinM rows (attention's row blocks, each tile read by every block of
// a head), not for decode's few query heads per tile, where no later call reads the tile again.
template <typename TV>
static inline bool nn_kept_panels(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const TV *V, int64_t ldv,
                                  float *C, int64_t ldc) {
    if (M <= kMR || K == 0 || N == 0 || (!std::is_same_v<TV, float> && M < kPackMinM)) return false;
    constexpr int W = kNV * VW;
    constexpr PanelKind kind = std::is_same_v<TV, float> ? PanelKind::F32RowsV : PanelKind::WidenedRowsV;
    const int64_t npan = (N + W - 1) / W;
    bool hit = false;
    float *panels = static_cast<float *>(cached_panels(V, ldv, N, K, kind, size_t(npan * W * K) * sizeof(float), hit));
    for (int64_t pc = 0; pc < K; pc += kKC) {
        const int64_t kc = min64(kKC, K - pc);
        for (int64_t j = 0; j < N; j += W) {
            float *panel = panels + pc * npan * W + (j / W) * kc * W;
            if (!hit) pack_rows<kNV>(V + pc * ldv + j, ldv, kc, min64(W, N - j), panel);
            outer_block<kMR, kNV, float>(M, min64(W, N - j), kc, P + pc, ldp, panel, W, 0, C + j, ldc, 1.0f, true);
        }
    }
    return true;
}
template <typename TV>
static inline void nn_gemm_blocks(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const TV *V, int64_t ldv,
                                  float *C, int64_t ldc) {
    if (M <= kSmallMR)
        nn_acc<kSmallMR, kSmallNV>(M, N, K, P, ldp, V, ldv, C, ldc);
    else
        nn_acc<kMR, kNV>(M, N, K, P, ldp, V, ldv, C, ldc);
}

#if defined(RFK_SIMD_AVX512)
// C[0..MR)[0..128) += P V for a few rows of P over 128 columns of V read where they lie (8 vectors: the
// 512 bytes of an f32 row of D = 128, or 256 of a bf16 one), the rows of V in order.
template <int MR, typename TV>
RFK_KERNEL static void rows_outer_kernel(int64_t K, const float *p, int64_t ldp, const TV *v, int64_t ldv, float *c,
                                         int64_t ldc) {
    constexpr int NV = 8;
    vf acc[MR][NV];
    RFK_UNROLL for (int i = 0; i < MR; ++i) RFK_UNROLL for (int q = 0; q < NV; ++q) acc[i][q] = vzero();
    for (int64_t k = 0; k < K; ++k) {
        const TV *vk = v + k * ldv;
        vf a[MR];
        RFK_UNROLL for (int i = 0; i < MR; ++i) a[i] = vset1(p[i * ldp + k]);
        RFK_UNROLL for (int q = 0; q < NV; ++q) {
            vf b = vload(vk + q * VW);
            RFK_UNROLL for (int i = 0; i < MR; ++i) acc[i][q] = vfma(a[i], b, acc[i][q]);
        }
    }
    RFK_UNROLL for (int i = 0; i < MR; ++i) store_block_row<NV>(c + i * ldc, acc[i], 1.0f, true, NV * VW);
}

// C += P V for at most kMR rows of P (one strip of nn_acc's, which would read V in place), V in place, its
// columns in blocks of 128 (the rest, N mod 128, through nn_acc). nn_acc's 64-column blocks read 256 of every 512 bytes of an f32 row of D = 128, then
// the other 256 on the next block, and the hardware prefetchers, which follow whole rows, left the second
// block waiting on memory, as for bf16 P (nn_acc_bf16_few_rows): decode GQA in f32 spent 1.5x as long in
// P.V as in QK^T, which reads as many bytes. A block of 128 columns holds 2 rows of P in 16 accumulators,
// so 4 rows are 2 strips: the first streams V from memory, the second reads the block again from L2.
// Decode GQA B = 4, Hq = 32, Hkv = 8, N = 8192, D = 128, all f32, emitted kernel, AMD Zen 4, 2 threads,
// medians of 10 alternated runs: 12.8 -> 10.3 ms (floor 8.1), P.V now level with QK^T in perf's samples.
// Asking for the next key tile's rows as the first strip reads (as the bf16 kernel does) measured even.
// 8 rows (8 query heads per KV head) in 4 strips instead of nn_acc's 32-column blocks, with the dot form's
// QK^T (kPackMinM), Hq = 64: 21.1 -> 13.0 ms (floor 8.07; the dot form alone 15.7).
template <typename TV>
static inline void nn_acc_few_rows(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const TV *V, int64_t ldv,
                                   float *C, int64_t ldc) {
    constexpr int64_t W = 8 * VW, KB = 512;  // a block of 512 f32 rows of 128 columns: 256 KiB, in L2
    const int64_t whole = N / W * W;
    for (int64_t pc = 0; pc < K; pc += KB)
        for (int64_t j = 0; j < whole; j += W)
            for_strips<2>(M, [&](auto rows, int64_t i) {
                rows_outer_kernel<decltype(rows)::value, TV>(min64(KB, K - pc), P + i * ldp + pc, ldp, V + pc * ldv + j, ldv,
                                                             C + i * ldc + j, ldc);
            });
    if (whole < N) nn_gemm_blocks(M, N - whole, K, P, ldp, V + whole, ldv, C + whole, ldc);
}
#endif

template <typename TV>
static inline void nn_gemm(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const TV *V, int64_t ldv,
                           float *C, int64_t ldc) {
#if defined(RFK_SIMD_AVX512)
    if (M <= kMR && N >= 8 * VW) return nn_acc_few_rows(M, N, K, P, ldp, V, ldv, C, ldc);
#endif
    nn_gemm_blocks(M, N, K, P, ldp, V, ldv, C, ldc);
}

#endif  // RFK_SIMD_VECTOR

}  // namespace simd_detail

// NN public API (the P·V tile GEMMs). Without AVX2+FMA every function is the plain loop below its SIMD call.

static inline void gemm_nn_acc_f32(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const float *V,
                                   int64_t ldv, float *C, int64_t ldc) {
#if defined(RFK_SIMD_VECTOR)
    simd_detail::nn_gemm(M, N, K, P, ldp, V, ldv, C, ldc);
#else
    for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += P[i * ldp + k] * V[k * ldv + j];
#endif
}

// gemm_nn_acc_f32 with V an input of the generated kernel: its panels kept as gemm_nt_f32_input_b's.
static inline void gemm_nn_acc_f32_input_v(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const float *V,
                                           int64_t ldv, float *C, int64_t ldc) {
#if defined(RFK_SIMD_VECTOR)
    if (simd_detail::nn_kept_panels(M, N, K, P, ldp, V, ldv, C, ldc)) return;
#endif
    gemm_nn_acc_f32(M, N, K, P, ldp, V, ldv, C, ldc);
}

static inline void gemm_nn_acc_f32_bf16(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp,
                                        const uint16_t *V, int64_t ldv, float *C, int64_t ldc) {
#if defined(RFK_SIMD_VECTOR)
    simd_detail::nn_gemm(M, N, K, P, ldp, V, ldv, C, ldc);
#else
    for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += P[i * ldp + k] * bf16_to_f32(V[k * ldv + j]);
#endif
}

}  // namespace rfk

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // REDFUSE_SIMD_GEMM_NN_H
