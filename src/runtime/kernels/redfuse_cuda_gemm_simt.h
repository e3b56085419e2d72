// redfuse_cuda_gemm_simt.h: the SIMT path of the block GEMM (fp32 FMA, int8 dp4a) and the entry points.
//
// Last of the three texts pasted, in order, into generated CUDA (redfuse_cuda_gemm.h,
// redfuse_cuda_gemm_tc.h, redfuse_cuda_gemm_simt.h; CMake embeds their concatenation as
// kEmbeddedCudaGemmHeader); the contract of the entry points is in redfuse_cuda_gemm.h.
#ifndef REDFUSE_CUDA_GEMM_SIMT_H
#define REDFUSE_CUDA_GEMM_SIMT_H
#ifndef REDFUSE_CUDA_GEMM_TC_H
#error "redfuse_cuda_gemm_tc.h must come first"
#endif

namespace rf_gemm_detail {

// ---- SIMT path ---------------------------------------------------------------------------------
//
// Each thread of a compute group (Tg = 32..256 threads) owns a TM x TN micro-tile of C (8x8 by
// default: 64 accumulators, 16 operand registers, 2+2 float4 shared loads per 64 FMA; 4x4 for
// blocks of more than 256 threads); the
// group's thread grid TY x TX (powers of two, chosen per call from M and N) covers a BM x BN
// block tile with BM = TM*TY, BN = TN*TX. Rows of a thread: 4-row groups at a stride of BM/(TM/4)
// (and likewise columns), so a warp's float4 loads are contiguous. K is staged in chunks of KS = 8
// slices (a slice is one k for float, four k packed in an int for int8 x int8, consumed by dp4a),
// as [slice][BM + 4] and [slice][BN + 4] 32-bit words, double-buffered; the next chunk's global
// loads are issued before the current chunk's FMAs and stored after them. Further groups (T > 256)
// take alternate slices (split K) and add their partial tiles into C in turn.
constexpr int kSimtT = RF_GEMM_SIMT_TILE;  // micro-tile TM = TN
static_assert(kSimtT == 4 || kSimtT == 8, "SIMT micro-tiles are 4x4 or 8x8");
constexpr int kKS = 8;                                     // slices per chunk
constexpr int kPF = 4;                                     // prefetched words per operand and thread

// One staged word of an operand: float compute -> the element converted to float (bits); int8
// compute -> four consecutive k packed (k order = byte order). Raw form held across the FMAs.
template <bool INT, class T> struct simt_raw { T v; };
template <class T> struct simt_raw<true, T> { unsigned v; };

template <class T> struct simt_operand {
    const T *p;
    long long s_row, s_k;
    int rows, K;
    bool kfirst;  // consecutive threads walk k (k contiguous in the source)
    bool word4;   // int8: four k at once with one aligned 32-bit load
};

template <bool INT, class T>
__device__ __forceinline__ simt_raw<INT, T> simt_load(const simt_operand<T> &op, int row, int k) {
    simt_raw<INT, T> r;
    if constexpr (INT) {
        r.v = 0;
        if (row < op.rows) {
            const T *p = op.p + row * op.s_row;
            if (op.word4 && k + 3 < op.K) {
                r.v = *reinterpret_cast<const unsigned *>(p + k);
            } else {
RF_GEMM_UNROLL
                for (int e = 0; e < 4; ++e)
                    if (k + e < op.K) r.v |= raw_bits(p[(k + e) * op.s_k]) << (8 * e);
            }
        }
    } else {
        r.v = (row < op.rows && k < op.K) ? op.p[row * op.s_row + k * op.s_k] : T{};
    }
    return r;
}
template <bool INT, class T> __device__ __forceinline__ unsigned simt_word(simt_raw<INT, T> r) {
    if constexpr (INT) return r.v;
    else return __float_as_uint(to_f32(r.v));
}

template <bool INT> struct simt_acc { typedef float type; };
template <> struct simt_acc<true> { typedef int type; };

template <bool INT, class T>
__device__ __forceinline__ simt_operand<T> make_simt_operand(const T *p, int rows, int K, long long s_row, long long s_k) {
    simt_operand<T> op;
    op.p = p;
    op.s_row = s_row;
    op.s_k = s_k;
    op.rows = rows;
    op.K = K;
    op.kfirst = s_k == 1 && !(s_row == 1 && K == 1);
    op.word4 = INT && s_k == 1 && (reinterpret_cast<unsigned long long>(p) % 4) == 0 && (rows == 1 || s_row % 4 == 0);
    return op;
}

template <class TA, class TB> struct simt_args {
    simt_operand<TA> a;
    simt_operand<TB> b;
    int M, N, K;
    float *c;
    long long c_si;
    float alpha;
    bool accumulate;
    unsigned smem;  // shared address of the scratch
};

template <bool INT, class TA, class TB>
__device__ __forceinline__ void simt_run(const simt_args<TA, TB> &g) {
    constexpr int TM = kSimtT, TN = kSimtT, HM = TM / 4, HN = TN / 4, KPS = INT ? 4 : 1;
    typedef typename simt_acc<INT>::type acc_t;
    const int tid = threadIdx.x, nthr = blockDim.x;
    const int tg = nthr >= 256 ? 256 : nthr >= 128 ? 128 : nthr >= 64 ? 64 : 32;
    const int ltg = tg == 256 ? 8 : tg == 128 ? 7 : tg == 64 ? 6 : 5;
    const int groups = nthr / tg, grp = tid / tg, lt = tid - grp * tg;
    // Thread grid: the fewest tiles, then the smallest BM + BN (less staging per FMA).
    int lty = 0;
    {
        long long best = -1;
        int best_sum = 0;
        for (int y = 0; y <= ltg; ++y) {
            const int bm = TM << y, bn = TN << (ltg - y);
            if (bm > 256 || bn > 256 || bm + bn > 384) continue;
            const long long tiles = static_cast<long long>((g.M + bm - 1) / bm) * ((g.N + bn - 1) / bn);
            if (best < 0 || tiles < best || (tiles == best && bm + bn < best_sum)) {
                best = tiles;
                best_sum = bm + bn;
                lty = y;
            }
        }
    }
    const int ltx = ltg - lty, BM = TM << lty, BN = TN << ltx, PA = BM + 4, PB = BN + 4;
    const int ty = lt >> ltx, tx = lt & ((1 << ltx) - 1);
    const int stage_words = kKS * (PA + PB);
    const int chunks = (g.K + kKS * KPS - 1) / (kKS * KPS);
    const int lbm = lty + (TM == 8 ? 3 : 2), lbn = ltx + (TN == 8 ? 3 : 2);
    const int tot_a = kKS << lbm, tot_b = kKS << lbn;
    // Word e of a region -> (slice s, row r); consecutive e walk k when the source is k-contiguous.
    // Either way a warp's 32 stores hit 32 different banks (row pitch = 4 mod 32 words).
    auto slice_of = [](int e, bool kfirst, int lrows) { return kfirst ? (e & (kKS - 1)) : (e >> lrows); };
    auto row_of = [](int e, bool kfirst, int lrows) { return kfirst ? (e >> 3) : (e & ((1 << lrows) - 1)); };
    static_assert(kKS == 8, "row_of assumes 8 slices");

    for (int m0 = 0; m0 < g.M; m0 += BM) {
        for (int n0 = 0; n0 < g.N; n0 += BN) {
            const bool busy = grp < groups && m0 + ty * 4 < g.M && n0 + tx * 4 < g.N;
            acc_t acc[TM][TN];
RF_GEMM_UNROLL
            for (int i = 0; i < TM; ++i)
RF_GEMM_UNROLL
                for (int j = 0; j < TN; ++j) acc[i][j] = 0;

            // Stage chunk kc synchronously, starting at word index e0 (the prefetched words are done).
            auto stage_rest = [&](int kc, int e0) {
                const unsigned As = g.smem + static_cast<unsigned>((kc & 1) * stage_words) * 4u, Bs = As + kKS * PA * 4;
                const int k0 = kc * kKS * KPS;
                for (int e = e0 + tid; e < tot_a; e += nthr) {
                    const int s = slice_of(e, g.a.kfirst, lbm), r = row_of(e, g.a.kfirst, lbm);
                    rf_gemm_ptx::st_shared_u32(As + (s * PA + r) * 4, simt_word<INT, TA>(simt_load<INT>(g.a, m0 + r, k0 + s * KPS)));
                }
                for (int e = e0 + tid; e < tot_b; e += nthr) {
                    const int s = slice_of(e, g.b.kfirst, lbn), r = row_of(e, g.b.kfirst, lbn);
                    rf_gemm_ptx::st_shared_u32(Bs + (s * PB + r) * 4, simt_word<INT, TB>(simt_load<INT>(g.b, n0 + r, k0 + s * KPS)));
                }
            };
            if (chunks > 0) stage_rest(0, 0);
            for (int kc = 0; kc < chunks; ++kc) {
                __syncthreads();  // chunk kc is staged; chunk kc-1 is retired
                const bool more = kc + 1 < chunks;
                const int k1 = (kc + 1) * kKS * KPS;
                // Issue the next chunk's first loads now; they are stored after the FMAs.
                simt_raw<INT, TA> pa[kPF];
                simt_raw<INT, TB> pb[kPF];
RF_GEMM_UNROLL
                for (int x = 0; x < kPF; ++x) {
                    const int e = tid + x * nthr;
                    if (more && e < tot_a)
                        pa[x] = simt_load<INT>(g.a, m0 + row_of(e, g.a.kfirst, lbm), k1 + slice_of(e, g.a.kfirst, lbm) * KPS);
                    if (more && e < tot_b)
                        pb[x] = simt_load<INT>(g.b, n0 + row_of(e, g.b.kfirst, lbn), k1 + slice_of(e, g.b.kfirst, lbn) * KPS);
                }
                if (busy) {
                    const unsigned As = g.smem + static_cast<unsigned>((kc & 1) * stage_words) * 4u, Bs = As + kKS * PA * 4;
RF_GEMM_UNROLL
                    for (int s = 0; s < kKS; ++s) {
                        if (groups > 1 && (s % groups) != grp) continue;
                        unsigned av[TM], bv[TN];
RF_GEMM_UNROLL
                        for (int h = 0; h < HM; ++h) {
                            const uint4 v = rf_gemm_ptx::ld_shared_v4(As + (s * PA + h * (BM / HM) + ty * 4) * 4);
                            av[4 * h] = v.x; av[4 * h + 1] = v.y; av[4 * h + 2] = v.z; av[4 * h + 3] = v.w;
                        }
RF_GEMM_UNROLL
                        for (int h = 0; h < HN; ++h) {
                            const uint4 v = rf_gemm_ptx::ld_shared_v4(Bs + (s * PB + h * (BN / HN) + tx * 4) * 4);
                            bv[4 * h] = v.x; bv[4 * h + 1] = v.y; bv[4 * h + 2] = v.z; bv[4 * h + 3] = v.w;
                        }
RF_GEMM_UNROLL
                        for (int i = 0; i < TM; ++i)
RF_GEMM_UNROLL
                            for (int j = 0; j < TN; ++j) {
                                if constexpr (INT)
                                    acc[i][j] = rf_gemm_ptx::dp4a(static_cast<int>(av[i]), static_cast<int>(bv[j]), acc[i][j]);
                                else
                                    acc[i][j] = fmaf(__uint_as_float(av[i]), __uint_as_float(bv[j]), acc[i][j]);
                            }
                    }
                }
                if (more) {
                    const unsigned As = g.smem + static_cast<unsigned>(((kc + 1) & 1) * stage_words) * 4u, Bs = As + kKS * PA * 4;
RF_GEMM_UNROLL
                    for (int x = 0; x < kPF; ++x) {
                        const int e = tid + x * nthr;
                        if (e < tot_a)
                            rf_gemm_ptx::st_shared_u32(As + (slice_of(e, g.a.kfirst, lbm) * PA + row_of(e, g.a.kfirst, lbm)) * 4,
                                                       simt_word<INT, TA>(pa[x]));
                        if (e < tot_b)
                            rf_gemm_ptx::st_shared_u32(Bs + (slice_of(e, g.b.kfirst, lbn) * PB + row_of(e, g.b.kfirst, lbn)) * 4,
                                                       simt_word<INT, TB>(pb[x]));
                    }
                    if (kPF * nthr < tot_a || kPF * nthr < tot_b) stage_rest(kc + 1, kPF * nthr);
                }
            }
            // Epilogue: split-K groups add their partial tiles into C in turn.
            for (int turn = 0; turn < groups; ++turn) {
                if (busy && grp == turn) {
                    const bool add = g.accumulate || turn > 0;
RF_GEMM_UNROLL
                    for (int i = 0; i < TM; ++i) {
                        const int row = m0 + (i >> 2) * (BM / HM) + ty * 4 + (i & 3);
                        if (row >= g.M) continue;
                        float *crow = g.c + row * g.c_si;
RF_GEMM_UNROLL
                        for (int j = 0; j < TN; ++j) {
                            const int col = n0 + (j >> 2) * (BN / HN) + tx * 4 + (j & 3);
                            if (col < g.N) {
                                const float v = g.alpha * static_cast<float>(acc[i][j]);
                                crow[col] = add ? crow[col] + v : v;
                            }
                        }
                    }
                }
                __syncthreads();  // also retires the stages before the next tile
            }
        }
    }
}

template <class TA, class TB>
__device__ __forceinline__ void simt_gemm(int M, int N, int K, const TA *a, long long a_si, long long a_sk, const TB *b,
                                          long long b_sj, long long b_sk, float *c, long long c_si, float alpha,
                                          bool accumulate, unsigned char *scratch) {
    constexpr bool INT = select<TA, TB>::int8_pair;
    simt_args<TA, TB> g;
    g.a = make_simt_operand<INT>(a, M, K, a_si, a_sk);
    g.b = make_simt_operand<INT>(b, N, K, b_sj, b_sk);
    g.M = M;
    g.N = N;
    g.K = K;
    g.c = c;
    g.c_si = c_si;
    g.alpha = alpha;
    g.accumulate = accumulate;
    g.smem = rf_gemm_ptx::smem_u32(scratch);
    simt_run<INT>(g);
}

// rf_block_gemm with its path as parameters: TENSOR the tensor cores, FP8 (kFp8Mma, kFp8Unpack)
// their fp8 form (staging types = the operand types), else the 16-bit staging type of select. The
// host emulator runs every choice a target can make for fp8 pairs.
template <bool TENSOR, int FP8, class TA, class TB>
__device__ __forceinline__ void block_gemm(int M, int N, int K, const TA *a, long long a_si, long long a_sk, const TB *b,
                                           long long b_sj, long long b_sk, float *c, long long c_si, float alpha,
                                           bool accumulate, unsigned char *scratch) {
    __syncthreads();
    if (M <= 0 || N <= 0) return;
    if constexpr (FP8 != kFp8None)
        tc_gemm<type_of<TA>::kind, type_of<TB>::kind, FP8 == kFp8Unpack>(M, N, K > 0 ? K : 0, a, a_si, a_sk, b, b_sj, b_sk,
                                                                         c, c_si, alpha, accumulate, scratch);
    else if constexpr (TENSOR)
        tc_gemm<select<TA, TB>::ct, select<TA, TB>::ct, false>(M, N, K > 0 ? K : 0, a, a_si, a_sk, b, b_sj, b_sk, c, c_si,
                                                               alpha, accumulate, scratch);
    else
        simt_gemm(M, N, K > 0 ? K : 0, a, a_si, a_sk, b, b_sj, b_sk, c, c_si, alpha, accumulate, scratch);
}

}  // namespace rf_gemm_detail


// ---- entry points --------------------------------------------------------------------------------
__host__ __device__ constexpr int rf_block_gemm_scratch_bytes() {
    // RF_GEMM_STAGES x 16 KiB (32 KiB by default); the SIMT path needs at most 24.5 KiB.
    return rf_gemm_detail::kStages * rf_gemm_detail::kStageBytes;
}

template <typename TA, typename TB>
__device__ void rf_block_gemm_simt(int M, int N, int K, const TA *a, long long a_si, long long a_sk, const TB *b,
                                   long long b_sj, long long b_sk, float *c, long long c_si, float alpha,
                                   bool accumulate, unsigned char *smem_scratch) {
    __syncthreads();
    if (M > 0 && N > 0)
        rf_gemm_detail::simt_gemm(M, N, K > 0 ? K : 0, a, a_si, a_sk, b, b_sj, b_sk, c, c_si, alpha, accumulate,
                                  smem_scratch);
}

template <typename TA, typename TB>
__device__ void rf_block_gemm(int M, int N, int K, const TA *a, long long a_si, long long a_sk, const TB *b,
                              long long b_sj, long long b_sk, float *c, long long c_si, float alpha, bool accumulate,
                              unsigned char *smem_scratch) {
    rf_gemm_detail::block_gemm<rf_gemm_detail::tensor_path<TA, TB>(), rf_gemm_detail::fp8_path<TA, TB>()>(
        M, N, K, a, a_si, a_sk, b, b_sj, b_sk, c, c_si, alpha, accumulate, smem_scratch);
}

#endif  // REDFUSE_CUDA_GEMM_SIMT_H
