// redfuse_cuda_gemm.h: block-cooperative tile GEMMs for generated CUDA kernels.
//
// Pasted into generated CUDA sources and compiled by NVRTC at run time (sm_80 and newer for the
// tensor-core path; older targets fall back to the SIMT path). Self-contained: no includes, no
// cooperative_groups, no libcu++; the PTX is inline and every instruction used is listed in
// "PTX primitives" below.
//
//   template <typename TA, typename TB>
//   __device__ void rf_block_gemm(int M, int N, int K, const TA *a, long long a_si, long long a_sk,
//                                 const TB *b, long long b_sj, long long b_sk,
//                                 float *c, long long c_si, float alpha, bool accumulate,
//                                 unsigned char *smem_scratch);
//   template <typename TA, typename TB> __device__ void rf_block_gemm_simt(... same ...);
//   __host__ __device__ constexpr int rf_block_gemm_scratch_bytes();
//
//   C[i*c_si + j] = (accumulate ? C[i*c_si + j] : 0) + alpha * sum_{k<K} A(i,k) * B(k,j)
//   A(i,k) = a[i*a_si + k*a_sk],  B(k,j) = b[j*b_sj + k*b_sk],  0 <= i < M, 0 <= j < N.
//
// Contract. Every thread of the block calls with identical arguments (blockDim.x a multiple of 32,
// up to 1024; blockDim.y = blockDim.z = 1). The call starts and ends with __syncthreads(), so data
// the block wrote into a or b just before is visible, and C is complete for every thread after it.
// a and b may point to global or shared memory (generic pointers), with any strides (0, negative
// or non-contiguous included); C (float) may be global or shared. C must not overlap a, b or the
// scratch. smem_scratch: rf_block_gemm_scratch_bytes() bytes of shared memory, 16-byte aligned,
// used only during the call. M, N, K are any non-negative values (K == 0 gives C = accumulate ? C : 0).
// For C in shared memory, a row stride c_si = 8 (mod 32) avoids bank conflicts in the epilogue.
//
// Element types: float, rf_bf16, rf_f16 (raw 16 bits), rf_fp8e4m3, rf_fp8e5m2 (raw bytes) and
// signed char (int8).
//
// Paths (chosen at compile time from TA, TB):
//   * Tensor cores (mma.sync m16n8k16, fp32 accumulation) when at least one operand is a 16- or
//     8-bit type, except int8 x int8. Operands are staged into shared memory as bf16 (round to
//     nearest even; fp8 and int8 convert exactly, float and f16 round), or as f16 when one operand
//     is f16 and the other is f16, fp8 or int8 (all exact in f16).
//   * SIMT (register-blocked FMA, exact fp32 arithmetic) for float x float, and for int8 x int8
//     with exact int32 accumulation (dp4a), converted to float and scaled by alpha at the end.
//   rf_block_gemm_simt is the SIMT path for any pair of types (operands converted exactly to float,
//   or int32 for int8 x int8): the reference and fallback.
//
// Tunables (define before pasting this header): RF_GEMM_MAX_THREADS (default 256), the largest
// blockDim.x of the kernels using the GEMM. It only selects register budgets: up to 256 threads
// (255 registers a thread) a warp owns a 64x64 C tile (128 fp32 accumulators; ~250 registers
// when every stride is a run-time value, fewer when the call site's strides are constants) and a
// SIMT thread an 8x8 one (~190); above 256 (128 registers at 512 threads) 32x32 and 4x4, which fit
// 512 threads without spills (1024 threads, 64 registers, spill a little). Any blockDim works with
// any setting: a too large setting costs spills, a too small one speed.
// RF_GEMM_LOW_REGISTERS 1: the tensor-core loop does not overlap consecutive k16 steps, which
// lowers its need to ~215 registers (64x64 warp tiles) for callers with much state of their own.
// RF_GEMM_WARP_M / RF_GEMM_WARP_N (32 or 64) and RF_GEMM_SIMT_TILE (4 or 8) override the choice,
// e.g. 32x32 warp tiles for a caller that keeps many registers live across the GEMM call.
// RF_GEMM_STAGES (default 2): shared-memory stages of the tensor-core pipeline, 16 KiB each (the
// scratch is RF_GEMM_STAGES x 16 KiB); 3 keeps two chunks in flight instead of one, which hides
// more of the global-memory latency when few blocks share an SM.
#ifndef REDFUSE_CUDA_GEMM_H
#define REDFUSE_CUDA_GEMM_H

// The raw-bits element types (shared with other redfuse CUDA headers through this guard).
#ifndef RF_CUDA_SCALAR_TYPES_DEFINED
#define RF_CUDA_SCALAR_TYPES_DEFINED
struct rf_bf16 { unsigned short bits; };
struct rf_f16 { unsigned short bits; };
struct rf_fp8e4m3 { unsigned char bits; };
struct rf_fp8e5m2 { unsigned char bits; };
#endif

#ifndef RF_GEMM_MAX_THREADS
#define RF_GEMM_MAX_THREADS 256
#endif
#ifndef RF_GEMM_WARP_M
#define RF_GEMM_WARP_M (RF_GEMM_MAX_THREADS <= 256 ? 64 : 32)
#endif
#ifndef RF_GEMM_WARP_N
#define RF_GEMM_WARP_N (RF_GEMM_MAX_THREADS <= 256 ? 64 : 32)
#endif
#ifndef RF_GEMM_SIMT_TILE
#define RF_GEMM_SIMT_TILE (RF_GEMM_MAX_THREADS <= 256 ? 8 : 4)
#endif
#ifndef RF_GEMM_STAGES
#define RF_GEMM_STAGES 2
#endif
#ifndef RF_GEMM_LOW_REGISTERS
#define RF_GEMM_LOW_REGISTERS 0
#endif

#ifdef RF_GEMM_EMULATE
#define RF_GEMM_UNROLL
#define RF_GEMM_UNROLL_NOT
#else
#define RF_GEMM_UNROLL _Pragma("unroll")
#define RF_GEMM_UNROLL_NOT _Pragma("unroll 1")
#endif

// ---------------------------------------------------------------------------------------------
// PTX primitives. A host emulator (tests/unit/runtime/cuda_gemm_test.cpp) defines RF_GEMM_EMULATE
// and provides these functions itself, implemented from the PTX ISA's definitions, so that the
// rest of this header (all the index arithmetic) runs and is checked on a machine without a GPU.
// ---------------------------------------------------------------------------------------------
#ifndef RF_GEMM_EMULATE
namespace rf_gemm_ptx {
// 32-bit shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_u32(const void *p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return static_cast<unsigned>(a);
}
__device__ __forceinline__ bool is_global(const void *p) {
    unsigned r;
    asm("{\n\t.reg .pred p;\n\tisspacep.global p, %1;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(r) : "l"(p));
    return r != 0;
}
// 16-byte asynchronous copy global -> shared; bytes [src_bytes, 16) of the destination are zeroed.
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int src_bytes) {
    unsigned long long g;
    asm("cvta.to.global.u64 %0, %1;" : "=l"(g) : "l"(src));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(g), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
// Waits until at most N of this thread's most recent commit groups are pending.
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void st_shared_v4(unsigned addr, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void st_shared_u32(unsigned addr, unsigned v) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v));
}
__device__ __forceinline__ uint4 ld_shared_v4(unsigned addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}
// ldmatrix.x4 of four 8x8 b16 matrices, transposed when `trans` (warp-uniform; both forms are
// issued under complementary predicates, so there is no branch).
__device__ __forceinline__ void ldsm_x4_sel(unsigned (&r)[4], unsigned addr, bool trans) {
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\t"
                 "@p ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n\t"
                 "@!p ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n\t}"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr), "r"(static_cast<unsigned>(trans)));
}
// d += A(16x16, row) * B(16x8, col), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Round two floats to nearest even and pack: lo in bits 0..15, hi in bits 16..31.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi) {
    unsigned d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// c + sum of the four signed byte products of a and b.
__device__ __forceinline__ int dp4a(int a, int b, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
}  // namespace rf_gemm_ptx
#endif  // RF_GEMM_EMULATE

namespace rf_gemm_detail {

// ---- element types -------------------------------------------------------------------------
enum { kF32 = 0, kBF16 = 1, kF16 = 2, kE4M3 = 3, kE5M2 = 4, kI8 = 5 };
template <class T> struct type_of;
template <> struct type_of<float> { static constexpr int kind = kF32, bytes = 4; };
template <> struct type_of<rf_bf16> { static constexpr int kind = kBF16, bytes = 2; };
template <> struct type_of<rf_f16> { static constexpr int kind = kF16, bytes = 2; };
template <> struct type_of<rf_fp8e4m3> { static constexpr int kind = kE4M3, bytes = 1; };
template <> struct type_of<rf_fp8e5m2> { static constexpr int kind = kE5M2, bytes = 1; };
template <> struct type_of<signed char> { static constexpr int kind = kI8, bytes = 1; };

__device__ __forceinline__ int imin(int x, int y) { return x < y ? x : y; }
__device__ __forceinline__ int imax(int x, int y) { return x > y ? x : y; }

// Exact conversions to float (every supported type is a subset of float). No denormal floats are
// formed, so the results do not depend on flush-to-zero settings.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(rf_bf16 x) { return __uint_as_float(static_cast<unsigned>(x.bits) << 16); }
__device__ __forceinline__ float to_f32(rf_f16 x) {
    const unsigned s = (static_cast<unsigned>(x.bits) & 0x8000u) << 16, em = x.bits & 0x7fffu;
    if (em >= 0x7c00u) return __uint_as_float(s | 0x7f800000u | ((em & 0x3ffu) << 13));  // inf, NaN
    if (em >= 0x0400u) return __uint_as_float(s | ((em << 13) + (112u << 23)));         // normal
    const float v = static_cast<float>(em) * 5.9604644775390625e-08f;                   // em * 2^-24
    return s ? -v : v;
}
__device__ __forceinline__ float to_f32(rf_fp8e4m3 x) {  // OCP E4M3 (fn): bias 7, no inf, S.1111.111 = NaN
    const unsigned s = (static_cast<unsigned>(x.bits) & 0x80u) << 24, em = x.bits & 0x7fu;
    if (em == 0x7fu) return __uint_as_float(0x7fc00000u);
    if (em >= 0x08u) return __uint_as_float(s | ((em << 20) + (120u << 23)));
    const float v = static_cast<float>(em) * 0.001953125f;  // em * 2^-9
    return s ? -v : v;
}
__device__ __forceinline__ float to_f32(rf_fp8e5m2 x) {  // E5M2: bias 15, IEEE-like inf/NaN
    const unsigned s = (static_cast<unsigned>(x.bits) & 0x80u) << 24, em = x.bits & 0x7fu;
    if (em >= 0x7cu) return __uint_as_float(s | 0x7f800000u | ((em & 3u) << 21));
    if (em >= 0x04u) return __uint_as_float(s | ((em << 21) + (112u << 23)));
    const float v = static_cast<float>(em) * 1.52587890625e-05f;  // em * 2^-16
    return s ? -v : v;
}
__device__ __forceinline__ float to_f32(signed char x) { return static_cast<float>(x); }

template <class T> __device__ __forceinline__ unsigned raw_bits(T x) { return x.bits; }
__device__ __forceinline__ unsigned raw_bits(signed char x) { return static_cast<unsigned char>(x); }
template <class T> __device__ __forceinline__ T from_raw(unsigned bits) {
    T t;
    t.bits = static_cast<decltype(t.bits)>(bits);
    return t;
}
template <> __device__ __forceinline__ signed char from_raw<signed char>(unsigned bits) {
    return static_cast<signed char>(static_cast<unsigned char>(bits));
}

template <int CT> __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    if constexpr (CT == kF16) return rf_gemm_ptx::pack_f16x2(lo, hi);
    else return rf_gemm_ptx::pack_bf16x2(lo, hi);
}

// Which path and which 16-bit staging type a pair of element types gets.
template <class TA, class TB> struct select {
    static constexpr int ka = type_of<TA>::kind, kb = type_of<TB>::kind;
    static constexpr bool int8_pair = ka == kI8 && kb == kI8;
    static constexpr bool tensor = (ka != kF32 || kb != kF32) && !int8_pair;
    static constexpr bool a_f16_exact = ka == kF16 || ka == kE4M3 || ka == kE5M2 || ka == kI8;
    static constexpr bool b_f16_exact = kb == kF16 || kb == kE4M3 || kb == kE5M2 || kb == kI8;
    static constexpr int ct = ((ka == kF16 || kb == kF16) && a_f16_exact && b_f16_exact) ? kF16 : kBF16;
};

// ---- tensor-core path --------------------------------------------------------------------------
//
// Tile shapes. A warp owns a WM x WN block of C (64x64 for <= 256 threads): per k16 step it loads
// WM/16 A fragments and WN/16 B fragment pairs with ldmatrix.x4 and issues (WM/16)*(WN/8)
// mma.m16n8k16 (2048 FMA each). Shared memory is the limit to beat: an SM reads 128 B/clock, and
// mma.sync bf16 on H100/H200 sustains roughly 1000-1300 dense FMA/clock/SM (about 60% of the
// wgmma peak), so the tensor pipe stays the bottleneck only above ~8-10 FMA per shared byte:
//   warp tile 32x32:  8 mma / 4 ldmatrix.x4 (2 KiB)  =  8 FMA/B  (shared-memory bound)
//   warp tile 64x32: 16 mma / 6 ldmatrix.x4 (3 KiB)  = 10.7 FMA/B
//   warp tile 64x64: 32 mma / 8 ldmatrix.x4 (4 KiB)  = 16 FMA/B; with the staging stores (16 KiB
//                    per 128x128x32 chunk, 32 FMA/B) 10.7 FMA/B overall.
// 64x64 needs 128 accumulators a thread, hence ~250 registers and at most 256 threads.
// The warps of a block are arranged WR x WC over a block tile of (WR*WM) x (WC*WN) (at most 256
// operand rows in total: 128x128 for four 64x64 warps), chosen per call from M, N and the warp
// count; warps beyond WR*WC form G split-K groups that take alternate k16 steps of the same
// staged chunk (8 warps at M=N=128: two groups of 4) and add their partial tiles into C in turn.
// K is staged in chunks of BK = 32 (two k16 steps) into a ring of S stages (RF_GEMM_STAGES,
// default 2) of 16 KiB, each holding (WR*WM + WC*WN) rows x 64 bytes, so a 128x128 tile's chunk
// is 16 KiB. The copy of chunk kc + S - 1 (cp.async when possible) is issued right after the
// barrier that retires chunk kc - 1's stage, one barrier per chunk, and overlaps the current
// chunk's 64 mma per warp.
constexpr int kBK = 32;                 // k per staged chunk (two k16 steps)
constexpr int kStageBytes = 16384;      // one stage: up to 256 rows x 64 bytes
constexpr int kStages = RF_GEMM_STAGES;
static_assert(kStages >= 2 && kStages <= 4, "2 to 4 stages");
constexpr int kTcWMx = RF_GEMM_WARP_M;  // warp tile rows
constexpr int kTcWN = RF_GEMM_WARP_N;   // warp tile columns
static_assert((kTcWMx == 32 || kTcWMx == 64) && (kTcWN == 32 || kTcWN == 64), "warp tiles are 32 or 64 wide");
constexpr int kMI = kTcWMx / 16;   // m16 fragments per warp
constexpr int kNJ = kTcWN / 8;     // n8 fragments per warp (even: loaded in pairs)
static_assert(kNJ % 2 == 0, "B fragments are loaded in pairs");

// Shared-memory layout of a staged operand region. Units are 16-byte chunks (8 elements). A
// region is [outer][inner] with inner contiguous: K-major (outer = m or n, inner = the 32 k of the
// chunk, 4 units per row) when the source's k stride is 1 or the source is not contiguous along
// m/n; MN-major (outer = the 32 k, inner = the rows of the block tile) when the source is
// contiguous along m/n. Either way the global copy reads contiguous runs, and ldmatrix (.trans
// for MN-major) produces the same fragments. Unit (o, c) lives at o * (16 << log_cpr) + (swz << 4)
// where log_cpr = log2(units per row) and swz XORs c with bits of o so that the eight 16-byte rows
// one ldmatrix phase reads (8 consecutive o at a fixed c) fall in eight different bank groups:
//   cpr = 4 (K-major): swz = c ^ ((o >> 1) & 3)   (the byte offset mod 128 is 64*(o&1) + 16*swz)
//   cpr >= 8 (MN-major): swz = c ^ (o & 7)        (the byte offset mod 128 is 16*(swz&7))
__device__ __forceinline__ int swz(int o, int c, int log_cpr) {
    return log_cpr == 2 ? (c ^ ((o >> 1) & 3)) : (c ^ (o & 7));
}

// Eight consecutive elements along the region's inner dimension, converted to the 16-bit staging
// type CT and packed in pairs (element 2e in the low half of word e). nv = how many are valid
// (the rest are zero); vec: the 8 elements are contiguous and aligned for one vector load.
template <int CT, class T>
__device__ __forceinline__ uint4 load_unit(const T *p, long long si, int nv, bool vec) {
    constexpr int kind = type_of<T>::kind;
    if constexpr (kind == CT) {
        if (vec && nv == 8) return *reinterpret_cast<const uint4 *>(p);
        unsigned long long lo = 0, hi = 0;  // elements 0-3 and 4-7, 16 bits each
RF_GEMM_UNROLL_NOT
        for (int e = 0; e < nv; ++e) {
            const unsigned long long v = raw_bits(p[e * si]);
            if (e < 4) lo |= v << (16 * e);
            else hi |= v << (16 * (e - 4));
        }
        return make_uint4(static_cast<unsigned>(lo), static_cast<unsigned>(lo >> 32), static_cast<unsigned>(hi),
                          static_cast<unsigned>(hi >> 32));
    } else {
        if (!(vec && nv == 8)) {  // strided, unaligned or a tail: element pairs, not unrolled
            unsigned long long lo = 0, hi = 0;
RF_GEMM_UNROLL_NOT
            for (int e = 0; e < nv; e += 2) {
                const float f0 = to_f32(p[e * si]), f1 = e + 1 < nv ? to_f32(p[(e + 1) * si]) : 0.0f;
                const unsigned long long w = pack2<CT>(f0, f1);
                if (e < 4) lo |= w << (16 * e);
                else hi |= w << (16 * (e - 4));
            }
            return make_uint4(static_cast<unsigned>(lo), static_cast<unsigned>(lo >> 32), static_cast<unsigned>(hi),
                              static_cast<unsigned>(hi >> 32));
        }
        float f[8];  // one aligned vector load, then the conversions
        if constexpr (kind == kF32) {
            const float4 x = reinterpret_cast<const float4 *>(p)[0], y = reinterpret_cast<const float4 *>(p)[1];
            f[0] = x.x; f[1] = x.y; f[2] = x.z; f[3] = x.w;
            f[4] = y.x; f[5] = y.y; f[6] = y.z; f[7] = y.w;
        } else if constexpr (type_of<T>::bytes == 2) {
            const uint4 v = *reinterpret_cast<const uint4 *>(p);
            const unsigned w[4] = {v.x, v.y, v.z, v.w};
RF_GEMM_UNROLL
            for (int e = 0; e < 8; ++e) f[e] = to_f32(from_raw<T>((w[e >> 1] >> ((e & 1) * 16)) & 0xffffu));
        } else {
            const uint2 v = *reinterpret_cast<const uint2 *>(p);
RF_GEMM_UNROLL
            for (int e = 0; e < 8; ++e) f[e] = to_f32(from_raw<T>(((e < 4 ? v.x : v.y) >> ((e & 3) * 8)) & 0xffu));
        }
        return make_uint4(pack2<CT>(f[0], f[1]), pack2<CT>(f[2], f[3]), pack2<CT>(f[4], f[5]), pack2<CT>(f[6], f[7]));
    }
}

// How one operand is read: the region view (outer/inner extents and strides) and the copy mode.
enum { kCopyScalar = 0, kCopyVector = 1, kCopyAsync = 2 };
template <class T> struct operand {
    const T *p;
    long long so, si;  // element strides along outer and inner
    int ext_o, ext_i;  // extents along outer and inner
    int mn;            // 1: MN-major region (outer = k), 0: K-major (outer = m or n)
    int mode;          // kCopy*
};

// The view and copy mode of an operand with `rows` rows (M or N), row stride s_row, k stride s_k.
template <int CT, class T>
__device__ __forceinline__ operand<T> make_operand(const T *p, int rows, int K, long long s_row, long long s_k) {
    operand<T> op;
    op.p = p;
    if (K == 1) s_k = 1;        // a single k: its stride is irrelevant
    if (rows == 1) s_row = 1;   // likewise a single row
    op.mn = (s_k != 1 && s_row == 1) ? 1 : 0;
    if (op.mn) { op.so = s_k; op.si = 1; op.ext_o = K; op.ext_i = rows; }
    else { op.so = s_row; op.si = s_k; op.ext_o = rows; op.ext_i = K; }
    op.mode = kCopyScalar;
    if (op.si == 1) {
        constexpr int bytes = type_of<T>::bytes;
        const unsigned long long addr = reinterpret_cast<unsigned long long>(p);
        const int align = bytes == 1 ? 8 : 16;  // one uint2 (8 x 8-bit) or uint4 / 2 x float4
        const bool row_ok = op.ext_o == 1 || ((op.so * bytes) % align) == 0;
        if (row_ok && (addr % align) == 0) {
            op.mode = kCopyVector;
            if (type_of<T>::kind == CT && rf_gemm_ptx::is_global(p)) op.mode = kCopyAsync;
        }
    }
    return op;
}

// Stage one operand's part of a chunk: region origin (o0, i0) in (outer, inner) coordinates,
// 2^log_cpr units per region row, `units` units in all, at shared address `region`.
template <int CT, class T>
__device__ __forceinline__ void stage_operand(const operand<T> &op, unsigned region, int o0, int i0, int log_cpr,
                                              int units) {
    const int tid = threadIdx.x, nthr = blockDim.x, cmask = (1 << log_cpr) - 1;
    if (op.mode == kCopyAsync) {
        for (int u = tid; u < units; u += nthr) {
            const int o = u >> log_cpr, c = u & cmask;
            const int go = o0 + o, gi = i0 + (c << 3);
            const int nv = go < op.ext_o ? imin(imax(op.ext_i - gi, 0), 8) : 0;
            const T *src = nv > 0 ? op.p + go * op.so + gi : op.p;
            rf_gemm_ptx::cp_async16(region + (o << (log_cpr + 4)) + (swz(o, c, log_cpr) << 4), src, nv * 2);
        }
    } else {
        const bool vec = op.mode == kCopyVector;
        // Two units per thread in flight: both loads first, then conversions and stores.
        for (int u0 = tid; u0 < units; u0 += 2 * nthr) {
            uint4 v[2];
RF_GEMM_UNROLL
            for (int x = 0; x < 2; ++x) {
                const int u = u0 + x * nthr;
                const int o = u >> log_cpr, c = u & cmask;
                const int go = o0 + o, gi = i0 + (c << 3);
                const int nv = (u < units && go < op.ext_o) ? imin(imax(op.ext_i - gi, 0), 8) : 0;
                v[x] = load_unit<CT>(op.p + (nv > 0 ? go * op.so + gi * op.si : 0), op.si, nv, vec);
            }
RF_GEMM_UNROLL
            for (int x = 0; x < 2; ++x) {
                const int u = u0 + x * nthr;
                const int o = u >> log_cpr, c = u & cmask;
                if (u < units) rf_gemm_ptx::st_shared_v4(region + (o << (log_cpr + 4)) + (swz(o, c, log_cpr) << 4), v[x]);
            }
        }
    }
}

struct tc_shape {
    int lwr, lwc;  // log2 of the warp grid WR x WC
    int groups;    // split-K groups
};

// Choose the warp grid for an M x N problem with W warps: minimize the estimated time
// tiles x (chunks x k16-steps-per-chunk-per-group + 2 chunks of prologue/epilogue), then prefer
// more busy warps.
__device__ __forceinline__ tc_shape tc_choose(int M, int N, int K, int W) {
    const int chunks = (K + kBK - 1) / kBK;
    tc_shape best = {0, 0, W};
    long long best_cost = -1;
    int best_busy = 0;
    for (int lwr = 0; lwr <= 3; ++lwr)
        for (int lwc = 0; lwc <= 3; ++lwc) {
            const int wr = 1 << lwr, wc = 1 << lwc;
            if (wr * kTcWMx + wc * kTcWN > 256 || wr * wc > W) continue;
            const int groups = W / (wr * wc);
            const long long tiles = static_cast<long long>((M + wr * kTcWMx - 1) / (wr * kTcWMx)) *
                                    ((N + wc * kTcWN - 1) / (wc * kTcWN));
            const int steps = groups >= 2 ? 1 : 2;
            const long long cost = tiles * (static_cast<long long>(chunks) * steps + 2);
            const int busy = wr * wc * (groups < 2 ? groups : 2);
            if (best_cost < 0 || cost < best_cost || (cost == best_cost && busy > best_busy)) {
                best_cost = cost;
                best_busy = busy;
                best = {lwr, lwc, groups};
            }
        }
    return best;
}

template <class TA, class TB> struct tc_args {
    operand<TA> a;
    operand<TB> b;
    int M, N, K;
    float *c;
    long long c_si;
    float alpha;
    bool accumulate;
    unsigned smem;  // shared address of the scratch
    tc_shape shape;
};

// Fragment loads. mma.m16n8k16's fragments (PTX ISA, .bf16/.f16), g = lane / 4, t = lane % 4:
//   A (16x16, row): reg0 = (row g, k 2t..2t+1), reg1 = (row g+8, k 2t..), reg2 = (row g, k 8+2t..),
//                   reg3 = (row g+8, k 8+2t..)  (the lower k in the low 16 bits)
//   B (16x8, col):  reg0 = (k 2t..2t+1, col g), reg1 = (k 8+2t.., col g)
//   C (16x8, f32):  c0, c1 = (row g, col 2t, 2t+1), c2, c3 = (row g+8, col 2t, 2t+1)
// ldmatrix.x4: lanes 8q..8q+7 address the 8 rows (16 bytes each) of matrix q, and register q of
// lane l receives (row l/4, columns 2(l%4), 2(l%4)+1) of matrix q; with .trans it receives the
// transposed matrix's, i.e. (columns l/4 of stored rows 2(l%4) and 2(l%4)+1).
// So for A, matrix q must be (rows 8(q&1).., k 8(q>>1)..); for a pair of n8 tiles of B, matrix q
// is (n 8(q>>1).., k 8(q&1)..), registers {0,1} feeding n8 tile 0 and {2,3} tile 1:
//   A K-major (stored rows m): lane addresses row m = (lane & 15), k unit 2j + (lane >> 4).
//   A MN-major (stored rows k, .trans): k row 16j + 8(q>>1) + (lane&7), m unit 2i + (q&1).
//   B K-major (stored rows n): row n = 8(q>>1) + (lane&7), k unit 2j + (q&1).
//   B MN-major (stored rows k, .trans): k row 16j + 8(q&1) + (lane&7), n unit 2pj + (q>>1).
// A non-transposed stored (n, k) 8x8 gives lane (n = l/4, k = 2t..), B's layout; a transposed
// stored (k, m) 8x8 gives (m = l/4, k = 2t..), A's layout. Byte offset of a fragment (i or pj,
// k16 step j) = off[i] + j * dj: the swizzles keep the j dependence affine (K-major: the unit
// changes from c to c ^ 2, i.e. +-2 units, the sign a lane constant; MN-major: +16 rows).
struct frag_offsets {
    int a[kMI], b[kNJ / 2];
    int da, db;
};
__device__ __forceinline__ frag_offsets tc_frag_offsets(int lane, int wm0, int wn0, bool amn, bool bmn, int lcpr_a,
                                                        int lcpr_b) {
    frag_offsets f;
    const int q = lane >> 3, rr = lane & 7;
    // K-major: o = row, unit c_j = (2j + h) ^ x with x = ((o >> 1) & 3), o = 16i + (lane & 15) + wm0
    // (wm0 a multiple of 16, so x only depends on the lane); c_1 - c_0 = (x & 2) ? -2 : 2.
    // MN-major: the row o = 16j + (lane-dependent part); swz only reads o's low 3 bits, so the
    // j step is 16 rows. (A 32-row region has 4 units per row and uses the cpr = 4 swizzle.)
RF_GEMM_UNROLL
    for (int i = 0; i < kMI; ++i) {
        if (!amn) {
            const int o = wm0 + 16 * i + (lane & 15), x = (lane >> 1) & 3;
            f.a[i] = (o << 6) + (((lane >> 4) ^ x) << 4);
        } else {
            const int o = ((q >> 1) << 3) + rr;
            f.a[i] = (o << (lcpr_a + 4)) + (swz(o, ((wm0 + 16 * i) >> 3) + (q & 1), lcpr_a) << 4);
        }
    }
    f.da = amn ? (16 << (lcpr_a + 4)) : ((((lane >> 1) & 3) & 2) ? -32 : 32);
RF_GEMM_UNROLL
    for (int pj = 0; pj < kNJ / 2; ++pj) {
        if (!bmn) {
            const int o = wn0 + 16 * pj + ((q >> 1) << 3) + rr, x = (rr >> 1) & 3;
            f.b[pj] = (o << 6) + (((q & 1) ^ x) << 4);
        } else {
            const int o = ((q & 1) << 3) + rr;
            f.b[pj] = (o << (lcpr_b + 4)) + (swz(o, ((wn0 + 16 * pj) >> 3) + (q >> 1), lcpr_b) << 4);
        }
    }
    f.db = bmn ? (16 << (lcpr_b + 4)) : ((((rr >> 1) & 3) & 2) ? -32 : 32);
    return f;
}

// All C tiles of the problem.
template <int CT, class TA, class TB>
__device__ __forceinline__ void tc_run(const tc_args<TA, TB> &g) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wr = 1 << g.shape.lwr, wc = 1 << g.shape.lwc, slots = wr * wc, groups = g.shape.groups;
    const int rows_a = wr * kTcWMx, rows_b = wc * kTcWN;  // block tile
    const int grp = warp / slots, slot = warp - grp * slots;
    const int wm0 = (slot & (wr - 1)) * kTcWMx, wn0 = (slot >> g.shape.lwr) * kTcWN;
    const bool amn = g.a.mn != 0, bmn = g.b.mn != 0;
    // Region geometry: log2(units per region row); K-major rows hold the chunk's 32 k (4 units).
    const int lrows_a = g.shape.lwr + (kTcWMx == 64 ? 6 : 5), lrows_b = g.shape.lwc + (kTcWN == 64 ? 6 : 5);
    const int lcpr_a = amn ? lrows_a - 3 : 2, lcpr_b = bmn ? lrows_b - 3 : 2;
    const int units_a = rows_a * 4, units_b = rows_b * 4;  // rows x 32 k / 8 per unit
    const unsigned b_off = static_cast<unsigned>(rows_a) * 64u;
    const int chunks = (g.K + kBK - 1) / kBK;
    const frag_offsets fo = tc_frag_offsets(lane, wm0, wn0, amn, bmn, lcpr_a, lcpr_b);

    for (int m0 = 0; m0 < g.M; m0 += rows_a) {
        for (int n0 = 0; n0 < g.N; n0 += rows_b) {
            const bool busy = grp < groups && m0 + wm0 < g.M && n0 + wn0 < g.N;
            float acc[kMI][kNJ][4];
RF_GEMM_UNROLL
            for (int i = 0; i < kMI; ++i)
RF_GEMM_UNROLL
                for (int j = 0; j < kNJ; ++j)
RF_GEMM_UNROLL
                    for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

            // Iteration it stages chunk it (into stage it % S, one commit group per iteration, empty
            // past the end) and computes chunk kc = it - (S - 1). Before that, wait_group(S - 2)
            // leaves only chunks kc+1 .. it-1 in flight, and the barrier publishes chunk kc and
            // retires chunk kc - 1, whose stage (it % S) is the one refilled.
            for (int it = 0; it < chunks + kStages - 1; ++it) {
                const int kc = it - (kStages - 1);
                if (kc >= 0) {
                    rf_gemm_ptx::cp_async_wait<kStages - 2>();
                    __syncthreads();
                }
                if (it < chunks) {
                    const unsigned base = g.smem + static_cast<unsigned>(it % kStages) * kStageBytes;
                    const int k0 = it * kBK;
                    stage_operand<CT>(g.a, base, amn ? k0 : m0, amn ? m0 : k0, lcpr_a, units_a);
                    stage_operand<CT>(g.b, base + b_off, bmn ? k0 : n0, bmn ? n0 : k0, lcpr_b, units_b);
                }
                rf_gemm_ptx::cp_async_commit();
                if (kc < 0 || !busy) continue;
                const unsigned sa = g.smem + static_cast<unsigned>(kc % kStages) * kStageBytes, sb = sa + b_off;
                // Unrolled, ptxas overlaps the two k16 steps (the next step's fragments load during
                // this step's mma); RF_GEMM_LOW_REGISTERS keeps the steps apart (~215 registers
                // instead of ~250 at 64x64 warp tiles with all strides run-time values).
#if RF_GEMM_LOW_REGISTERS
RF_GEMM_UNROLL_NOT
#else
RF_GEMM_UNROLL
#endif
                for (int j = 0; j < 2; ++j) {
                    if (groups > 1 && ((kc * 2 + j) % groups) != grp) continue;
                    unsigned af[kMI][4];
RF_GEMM_UNROLL
                    for (int i = 0; i < kMI; ++i) rf_gemm_ptx::ldsm_x4_sel(af[i], sa + fo.a[i] + j * fo.da, amn);
RF_GEMM_UNROLL
                    for (int pj = 0; pj < kNJ / 2; ++pj) {
                        unsigned bq[4];
                        rf_gemm_ptx::ldsm_x4_sel(bq, sb + fo.b[pj] + j * fo.db, bmn);
RF_GEMM_UNROLL
                        for (int i = 0; i < kMI; ++i) {
                            if constexpr (CT == kF16) {
                                rf_gemm_ptx::mma_f16(acc[i][2 * pj], af[i], bq[0], bq[1]);
                                rf_gemm_ptx::mma_f16(acc[i][2 * pj + 1], af[i], bq[2], bq[3]);
                            } else {
                                rf_gemm_ptx::mma_bf16(acc[i][2 * pj], af[i], bq[0], bq[1]);
                                rf_gemm_ptx::mma_bf16(acc[i][2 * pj + 1], af[i], bq[2], bq[3]);
                            }
                        }
                    }
                }
            }
            // Epilogue: the split-K groups add their partial tiles into C one after another
            // (acc[i][j][e]: row 16i + 8(e >> 1) + lane/4, column 8j + 2(lane%4) + (e & 1)).
            // A lane owns column pairs (2t, 2t+1): float2 accesses when C's rows allow them (with
            // c_si = 8 mod 32 a half-warp's 16 float2 then cover all 32 banks of shared memory).
            const int gr = lane >> 2, tc = (lane & 3) * 2;
            const bool pairs = (g.c_si & 1) == 0 && (reinterpret_cast<unsigned long long>(g.c) & 7) == 0;
            for (int turn = 0; turn < groups; ++turn) {
                if (busy && grp == turn) {
                    const bool add = g.accumulate || turn > 0;
RF_GEMM_UNROLL
                    for (int i = 0; i < kMI; ++i)
RF_GEMM_UNROLL
                        for (int h = 0; h < 2; ++h) {
                            const int row = m0 + wm0 + 16 * i + 8 * h + gr;
                            if (row >= g.M) continue;
                            float *crow = g.c + row * g.c_si;
RF_GEMM_UNROLL
                            for (int j = 0; j < kNJ; ++j) {
                                const int col = n0 + wn0 + 8 * j + tc;
                                const float v0 = g.alpha * acc[i][j][2 * h], v1 = g.alpha * acc[i][j][2 * h + 1];
                                if (pairs && col + 1 < g.N) {
                                    float2 *p2 = reinterpret_cast<float2 *>(crow + col);
                                    float2 o = add ? *p2 : make_float2(0.0f, 0.0f);
                                    o.x += v0;
                                    o.y += v1;
                                    *p2 = o;
                                } else {
                                    if (col < g.N) crow[col] = add ? crow[col] + v0 : v0;
                                    if (col + 1 < g.N) crow[col + 1] = add ? crow[col + 1] + v1 : v1;
                                }
                            }
                        }
                }
                __syncthreads();  // also retires the stages before the next tile's first copy
            }
        }
    }
}

template <int CT, class TA, class TB>
__device__ __forceinline__ void tc_gemm(int M, int N, int K, const TA *a, long long a_si, long long a_sk, const TB *b,
                                        long long b_sj, long long b_sk, float *c, long long c_si, float alpha,
                                        bool accumulate, unsigned char *scratch) {
    tc_args<TA, TB> g;
    g.a = make_operand<CT>(a, M, K, a_si, a_sk);
    g.b = make_operand<CT>(b, N, K, b_sj, b_sk);
    g.M = M;
    g.N = N;
    g.K = K;
    g.c = c;
    g.c_si = c_si;
    g.alpha = alpha;
    g.accumulate = accumulate;
    g.smem = rf_gemm_ptx::smem_u32(scratch);
    g.shape = tc_choose(M, N, K, static_cast<int>(blockDim.x) >> 5);
    tc_run<CT>(g);
}

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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    constexpr bool tensor = false;  // mma.sync bf16 and cp.async need sm_80
#else
    constexpr bool tensor = rf_gemm_detail::select<TA, TB>::tensor;
#endif
    __syncthreads();
    if (M <= 0 || N <= 0) return;
    if constexpr (tensor)
        rf_gemm_detail::tc_gemm<rf_gemm_detail::select<TA, TB>::ct>(M, N, K > 0 ? K : 0, a, a_si, a_sk, b, b_sj, b_sk,
                                                                    c, c_si, alpha, accumulate, smem_scratch);
    else
        rf_gemm_detail::simt_gemm(M, N, K > 0 ? K : 0, a, a_si, a_sk, b, b_sj, b_sk, c, c_si, alpha, accumulate,
                                  smem_scratch);
}

#endif  // REDFUSE_CUDA_GEMM_H
