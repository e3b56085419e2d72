// redfuse_cuda_gemm.h: block-cooperative tile GEMMs for generated CUDA kernels (contract, types, PTX).
//
// Pasted into generated CUDA sources and compiled by NVRTC at run time (sm_80 and newer for the
// tensor-core path; older targets fall back to the SIMT path). Self-contained: no includes, no
// cooperative_groups, no libcu++; the PTX is inline and every instruction used is listed in
// "PTX primitives" below. Three texts, pasted in this order (CMake embeds their concatenation as
// kEmbeddedCudaGemmHeader): this one (contract, tunables, PTX primitives, element types, path
// selection), redfuse_cuda_gemm_tc.h (the tensor-core path) and redfuse_cuda_gemm_simt.h (the
// SIMT path and the entry points).
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
//   * FP8 tensor cores when both operands are 8-bit floats (e4m3 or e5m2, mixed included) and the
//     target is sm_89 or newer: the bytes are staged unconverted (half the shared memory and
//     staging traffic of bf16 per k, cp.async where aligned), then mma.sync m16n8k32 .e4m3/.e5m2
//     with fp32 accumulation where the hardware has it (sm_89, sm_120+), or, on sm_90 to sm_110
//     (fp8 tensor cores through wgmma / tcgen05 only), unpacked in registers to f16 (exact) for
//     mma.sync m16n8k16 f16. On sm_80/sm_86 such pairs take the bf16 path above (exact: fp8 is a
//     subset of bf16), and so they do everywhere with RF_GEMM_FP8 0.
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
// RF_GEMM_FP8 (default 1): 0 stages fp8 pairs as bf16 on every target (to compare the two).
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
#ifndef RF_GEMM_FP8
#define RF_GEMM_FP8 1
#endif

#ifdef RF_GEMM_EMULATE
#define RF_GEMM_UNROLL
#define RF_GEMM_UNROLL_NOT
#else
#define RF_GEMM_UNROLL _Pragma("unroll")
#define RF_GEMM_UNROLL_NOT _Pragma("unroll 1")
#endif

// ---------------------------------------------------------------------------------------------
// PTX primitives. A host emulator (tests/unit/runtime/CudaGemmEmulator.h) defines RF_GEMM_EMULATE
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
// ldmatrix.x4 without .trans (the 8-bit path: its regions are always K-major).
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
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
// d += A(16x32, row) * B(32x8, col) on 8-bit floats, fp32 accumulators (PTX ISA 8.4+, sm_89+; an
// instruction of the hardware on sm_89 and sm_120+, see fp8_path). AE5 / BE5: that operand is
// e5m2, else e4m3.
template <bool AE5, bool BE5>
__device__ __forceinline__ void mma_fp8(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (!AE5 && !BE5)
        asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else if constexpr (!AE5 && BE5)
        asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else if constexpr (AE5 && !BE5)
        asm("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Four 8-bit floats (bytes 0..3 of v; E5: e5m2, else e4m3) to four f16, exactly (sm_89+): bytes
// 0, 1 -> lo, bytes 2, 3 -> hi (cvt.rn.f16x2.e4m3x2 puts the lower byte in the lower half).
template <bool E5> __device__ __forceinline__ void fp8x4_to_f16x4(unsigned v, unsigned &lo, unsigned &hi) {
    if constexpr (E5)
        asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e5m2x2 %0, l;\n\tcvt.rn.f16x2.e5m2x2 %1, h;\n\t}"
            : "=r"(lo), "=r"(hi) : "r"(v));
    else
        asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
            : "=r"(lo), "=r"(hi) : "r"(v));
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
// Bytes of an element of a kind (the staging types of the tensor-core path included).
__host__ __device__ constexpr int kind_bytes(int kind) { return kind == kF32 ? 4 : (kind == kBF16 || kind == kF16) ? 2 : 1; }

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

// Which path and which 16-bit staging type a pair of element types gets (fp8_pair: the fp8
// tensor-core path where the target has it, see fp8_path below; ct is then the staging type of the
// sm_80 fallback).
template <class TA, class TB> struct select {
    static constexpr int ka = type_of<TA>::kind, kb = type_of<TB>::kind;
    static constexpr bool int8_pair = ka == kI8 && kb == kI8;
    static constexpr bool fp8_pair = (ka == kE4M3 || ka == kE5M2) && (kb == kE4M3 || kb == kE5M2);
    static constexpr bool tensor = (ka != kF32 || kb != kF32) && !int8_pair;
    static constexpr bool a_f16_exact = ka == kF16 || ka == kE4M3 || ka == kE5M2 || ka == kI8;
    static constexpr bool b_f16_exact = kb == kF16 || kb == kE4M3 || kb == kE5M2 || kb == kI8;
    static constexpr int ct = ((ka == kF16 || kb == kF16) && a_f16_exact && b_f16_exact) ? kF16 : kBF16;
};

// The paths rf_block_gemm takes on the architecture being compiled: tensor cores (mma.sync bf16/f16
// and cp.async need sm_80) and, for two 8-bit float operands, the fp8 path (sm_89+): kFp8Mma, the
// fp8 mma.sync, where it is an instruction of the hardware (sm_89, sm_120+); kFp8Unpack, f16 mma
// on fragments unpacked in registers, where ptxas would lower the fp8 mma.sync to that anyway
// (sm_90 to sm_110: their fp8 tensor cores are wgmma / tcgen05 only). Without __CUDA_ARCH__ (the
// host emulator) the tensor cores and kFp8Mma are on; RF_GEMM_FP8 0 turns the fp8 path off.
enum { kFp8None = 0, kFp8Mma = 1, kFp8Unpack = 2 };
template <class TA, class TB> __host__ __device__ constexpr bool tensor_path() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    return false;
#else
    return select<TA, TB>::tensor;
#endif
}
template <class TA, class TB> __host__ __device__ constexpr int fp8_path() {
#if !RF_GEMM_FP8 || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890)
    return kFp8None;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200
    return select<TA, TB>::fp8_pair ? kFp8Unpack : kFp8None;
#else
    return select<TA, TB>::fp8_pair ? kFp8Mma : kFp8None;
#endif
}

}  // namespace rf_gemm_detail

#endif  // REDFUSE_CUDA_GEMM_H
