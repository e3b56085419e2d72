/** \file cuda_gemm_test.cpp
 * redfuse_cuda_gemm.h, redfuse_cuda_gemm_tc.h and redfuse_cuda_gemm_simt.h (the block-cooperative tile
 * GEMMs of generated CUDA kernels, pasted in that order), three ways:
 *
 *  1. Emulated on the host (always runs). The header is compiled as C++ with RF_GEMM_EMULATE: every
 *     CUDA thread of a block is a fiber (CudaEmu.h), __syncthreads a block barrier, and the PTX primitives
 *     (ldmatrix .x4/.trans, mma.sync m16n8k16 bf16/f16 and m16n8k32 e4m3/e5m2, cp.async with zero
 *     fill and wait_group, cvt.rn.bf16x2/f16x2 and f16x2.e4m3x2/e5m2x2, dp4a, ld/st.shared) are
 *     implemented in CudaEmuPtx.h from the PTX ISA's definitions
 *     (cross-checked with CuTe's SM75_U32x4_LDSM_N / SM75_U16x8_LDSM_T layouts and CUDA's
 *     __floats2bfloat162_rn), independently of the header. So all of the header's own logic (tile
 *     shapes, swizzles, fragment addressing, tails, the pipeline, split-K) runs against a float64
 *     reference, in the default configuration and in the one for 512 threads with 3 stages, and for
 *     fp8 pairs every route a target can take (fp8 mma, f16 halves unpacked in registers, bf16). The
 *     emulator also checks what a GPU would not report: every shared word is tracked per barrier
 *     epoch, and a write and another thread's access in the same epoch (a missing barrier or wait)
 *     is an error; cp.async copies land only at cp.async.wait_group; warp collectives must be
 *     reached by all 32 lanes with the same operation (divergence deadlocks and is reported);
 *     addresses must be aligned and inside the scratch (which starts as garbage); every ldmatrix
 *     phase must hit 8 different bank groups.
 *  2. Compiled by NVRTC to cubins for sm_80 and sm_90a (needs NVRTC, no GPU): every instantiation
 *     at 128 and 256 threads without register spills (registers and shared memory printed), and the
 *     tensor-core ones within 224 registers with RF_GEMM_LOW_REGISTERS (headroom for the caller);
 *     fp8 pairs take bf16 staging on sm_80 and f16 halves on sm_90a, and also compile for sm_89
 *     (the fp8 mma instruction).
 *  3. Run on a CUDA device when one is available (skipped otherwise): awkward shapes, layouts,
 *     strides, alignments, C and A in shared memory, accumulate on/off, against the same reference,
 *     plus informational throughput figures for 128x128x128 bf16 tiles (2 and 3 stages).
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/CudaRuntime.h"

#include "CudaGemmEmulator.h"
#include "CudaGemmReference.h"


// =====================================================================================================
// 1. Emulated runs.
// =====================================================================================================
namespace {

using namespace gemm_check;

struct EmuCase {
    int M, N, K;
    Lay la, lb;
    int misalign;
    bool accumulate;
    float alpha;
    int threads;
    bool a_shared = false;  // A lives in (emulated) shared memory: no cp.async for it
};

/** The element types of the wide configuration (same layout). */
template <class T> struct wide_of { using type = T; };
template <> struct wide_of<gemm_emu::rf_bf16> { using type = gemm_emu::wide::rf_bf16; };
template <> struct wide_of<gemm_emu::rf_f16> { using type = gemm_emu::wide::rf_f16; };
template <> struct wide_of<gemm_emu::rf_fp8e4m3> { using type = gemm_emu::wide::rf_fp8e4m3; };
template <> struct wide_of<gemm_emu::rf_fp8e5m2> { using type = gemm_emu::wide::rf_fp8e5m2; };

/** How an emulated case calls the GEMM: the entry point as the host sees it (fp8 pairs: the fp8
 *  mma, as on sm_89 / sm_120), or the fp8 routes of other targets through rf_gemm_detail::block_gemm:
 *  f16 halves unpacked in registers (sm_90, sm_100) or the bf16 staging of sm_80 / sm_86. */
enum class Route { entry, fp8_unpack, fp8_off };
const char *route_name(Route r) {
    return r == Route::fp8_unpack ? " (fp8 unpacked to f16)" : r == Route::fp8_off ? " (fp8 as bf16)" : "";
}

template <bool TENSOR, int FP8, class TA, class TB>
void call_block_gemm(bool wide, const Problem &p, const TA *a, const TB *b, float *c, unsigned char *scratch) {
    if (wide) {
        using WA = typename wide_of<TA>::type;
        using WB = typename wide_of<TB>::type;
        gemm_emu::wide::rf_gemm_detail::block_gemm<TENSOR, FP8>(p.M, p.N, p.K, reinterpret_cast<const WA *>(a), p.a.s_row,
                                                                p.a.s_k, reinterpret_cast<const WB *>(b), p.b.s_row, p.b.s_k,
                                                                c, p.c_si, p.alpha, p.accumulate, scratch);
    } else {
        gemm_emu::rf_gemm_detail::block_gemm<TENSOR, FP8>(p.M, p.N, p.K, a, p.a.s_row, p.a.s_k, b, p.b.s_row, p.b.s_k, c,
                                                          p.c_si, p.alpha, p.accumulate, scratch);
    }
}

/** Runs one case of rf_block_gemm<TA,TB> (or the SIMT path alone; or the wide configuration; or
 *  another fp8 route) in the emulator; "" when right. */
template <class TA, class TB>
std::string emulate_case(const EmuCase &ec, bool simt_only, uint32_t seed, bool wide = false, Route route = Route::entry) {
    constexpr Ty ta = ty_of<TA>(), tb = ty_of<TB>();
    using Sel = gemm_emu::rf_gemm_detail::select<TA, TB>;
    const bool tensor = Sel::tensor && !simt_only;
    const bool exact = Sel::int8_pair;
    Problem p = make_problem(ta, tb, ec.M, ec.N, ec.K, ec.la, ec.lb, ec.misalign, ec.accumulate, ec.alpha, seed);
    std::vector<float> c = p.c0;
    const TA *a = reinterpret_cast<const TA *>(p.a.bytes.data()) + p.a.origin;
    const TB *b = reinterpret_cast<const TB *>(p.b.bytes.data()) + p.b.origin;
    std::vector<std::pair<const void *, const void *>> shared;
    if (ec.a_shared) shared.push_back({p.a.bytes.data(), p.a.bytes.data() + p.a.bytes.size()});
    const size_t scratch_bytes = static_cast<size_t>(wide ? gemm_emu::wide::rf_block_gemm_scratch_bytes()
                                                          : gemm_emu::rf_block_gemm_scratch_bytes());
    std::vector<std::string> errors = gemm_emu::run_block(ec.threads, scratch_bytes, shared, [&](unsigned char *scratch) {
        using WA = typename wide_of<TA>::type;
        using WB = typename wide_of<TB>::type;
        namespace d = gemm_emu::rf_gemm_detail;
        if constexpr (Sel::fp8_pair) {
            if (route == Route::fp8_unpack) return call_block_gemm<true, d::kFp8Unpack>(wide, p, a, b, c.data(), scratch);
            if (route == Route::fp8_off) return call_block_gemm<true, d::kFp8None>(wide, p, a, b, c.data(), scratch);
        }
        if (wide && simt_only)
            gemm_emu::wide::rf_block_gemm_simt<WA, WB>(p.M, p.N, p.K, reinterpret_cast<const WA *>(a), p.a.s_row, p.a.s_k,
                                                       reinterpret_cast<const WB *>(b), p.b.s_row, p.b.s_k, c.data(), p.c_si,
                                                       p.alpha, p.accumulate, scratch);
        else if (wide)
            gemm_emu::wide::rf_block_gemm<WA, WB>(p.M, p.N, p.K, reinterpret_cast<const WA *>(a), p.a.s_row, p.a.s_k,
                                                  reinterpret_cast<const WB *>(b), p.b.s_row, p.b.s_k, c.data(), p.c_si, p.alpha,
                                                  p.accumulate, scratch);
        else if (simt_only)
            gemm_emu::rf_block_gemm_simt<TA, TB>(p.M, p.N, p.K, a, p.a.s_row, p.a.s_k, b, p.b.s_row, p.b.s_k, c.data(), p.c_si,
                                                 p.alpha, p.accumulate, scratch);
        else
            gemm_emu::rf_block_gemm<TA, TB>(p.M, p.N, p.K, a, p.a.s_row, p.a.s_k, b, p.b.s_row, p.b.s_k, c.data(), p.c_si,
                                            p.alpha, p.accumulate, scratch);
    });
    std::string out;
    for (auto &e : errors) out += "  emulator: " + e + "\n";
    // Float SIMT: 1e-5 of sum |a||b|; tensor path: inputs rounded alike, so only fp32
    // accumulation differs: 2e-4 (and 1e-2 against the unrounded inputs). The fp8 routes
    // round nothing (fp8 is a subset of f16 and bf16), so the bf16 staging model is exact for them.
    out += check(p, c, tensor, Sel::ct, exact, tensor ? 2e-4 : 1e-5);
    if (out.empty()) return "";
    return describe(ty_name(ta), ty_name(tb), p, ec.la, ec.lb, ec.misalign, ec.threads) + (simt_only ? " (simt)" : "") +
           (wide ? " (RF_GEMM_MAX_THREADS 512)" : "") + route_name(route) +
           (ec.a_shared ? " A in shared" : "") + "\n" + out;
}

/** A deterministic spread of cases: every awkward size against a few partners, all layouts. */
std::vector<EmuCase> emu_cases(int which) {
    std::vector<EmuCase> v;
    const int sizes[] = {1, 7, 16, 33, 64, 100, 129};
    const Lay lays[] = {Lay::kcontig, Lay::rcontig, Lay::strided, Lay::bcast, Lay::negative};
    const int threads[] = {128, 32, 256, 96, 64};
    int n = 0;
    for (int M : sizes)
        for (int N : sizes) {
            const int K = sizes[(n * 3 + which) % 7];
            const Lay la = lays[(n + which) % 5], lb = lays[(n / 5 + 2 * which) % 5];
            v.push_back({M, N, K, la, lb, (n + which) % 4 == 3 ? 1 : 0, n % 3 == 1, n % 5 == 2 ? 0.5f : 1.0f,
                         threads[(n + which) % 5], n % 7 == 4});
            ++n;
        }
    return v;
}

template <class TA, class TB>
void emulate_many(const std::vector<EmuCase> &cases, bool simt_only, int stride, int offset, Route route = Route::entry) {
    int failures = 0;
    for (size_t i = static_cast<size_t>(offset); i < cases.size(); i += static_cast<size_t>(stride)) {
        const std::string r = emulate_case<TA, TB>(cases[i], simt_only, 1000u + static_cast<uint32_t>(i), false, route);
        if (!r.empty()) {
            ADD_FAILURE() << r;
            if (++failures >= 3) return;
        }
    }
}

using gemm_emu::rf_bf16;
using gemm_emu::rf_f16;
using gemm_emu::rf_fp8e4m3;
using gemm_emu::rf_fp8e5m2;

TEST(CudaGemmEmulated, PathSelection) {
    using gemm_emu::rf_gemm_detail::select;
    EXPECT_TRUE((select<rf_bf16, rf_bf16>::tensor));
    EXPECT_TRUE((select<float, rf_bf16>::tensor));
    EXPECT_TRUE((select<rf_bf16, float>::tensor));
    EXPECT_TRUE((select<rf_fp8e4m3, rf_bf16>::tensor));
    EXPECT_TRUE((select<signed char, rf_bf16>::tensor));
    EXPECT_FALSE((select<float, float>::tensor));
    EXPECT_FALSE((select<signed char, signed char>::tensor));
    EXPECT_EQ((select<rf_f16, rf_f16>::ct), 2);
    EXPECT_EQ((select<rf_f16, rf_fp8e5m2>::ct), 2);
    EXPECT_EQ((select<rf_f16, signed char>::ct), 2);
    EXPECT_EQ((select<rf_f16, rf_bf16>::ct), 1);
    EXPECT_EQ((select<rf_f16, float>::ct), 1);
    EXPECT_EQ((select<rf_fp8e4m3, rf_fp8e5m2>::ct), 1);
    // fp8 pairs: the fp8 path (on the host: the fp8 mma); one fp8 operand alone: bf16 staging.
    namespace d = gemm_emu::rf_gemm_detail;
    EXPECT_TRUE((select<rf_fp8e4m3, rf_fp8e4m3>::fp8_pair && select<rf_fp8e5m2, rf_fp8e4m3>::fp8_pair));
    EXPECT_FALSE((select<rf_fp8e4m3, rf_bf16>::fp8_pair || select<float, rf_fp8e5m2>::fp8_pair ||
                  select<signed char, rf_fp8e4m3>::fp8_pair || select<rf_f16, rf_fp8e4m3>::fp8_pair));
    EXPECT_EQ((d::fp8_path<rf_fp8e4m3, rf_fp8e5m2>()), d::kFp8Mma);
    EXPECT_EQ((d::fp8_path<rf_fp8e4m3, rf_bf16>()), d::kFp8None);
    EXPECT_EQ((d::fp8_path<rf_bf16, rf_bf16>()), d::kFp8None);
    EXPECT_EQ(d::chunk_k(d::kE4M3), 64);
    EXPECT_EQ(d::chunk_k(d::kBF16), 32);
    EXPECT_EQ(gemm_emu::rf_block_gemm_scratch_bytes(), 32768);
    EXPECT_EQ(gemm_emu::rf_gemm_detail::kTcWMx, 64);
    EXPECT_EQ(gemm_emu::rf_gemm_detail::kTcWN, 64);
    EXPECT_EQ(gemm_emu::rf_gemm_detail::kSimtT, 8);
    EXPECT_EQ(gemm_emu::wide::rf_gemm_detail::kTcWMx, 32);
    EXPECT_EQ(gemm_emu::wide::rf_gemm_detail::kTcWN, 32);
    EXPECT_EQ(gemm_emu::wide::rf_gemm_detail::kSimtT, 4);
    EXPECT_EQ(gemm_emu::wide::rf_gemm_detail::kStages, 3);
    EXPECT_EQ(gemm_emu::wide::rf_block_gemm_scratch_bytes(), 49152);
}

// The header's exact decoders against the ldexp ones, over every code.
TEST(CudaGemmEmulated, ElementConversions) {
    namespace d = gemm_emu::rf_gemm_detail;
    for (unsigned v = 0; v < 65536; ++v) {
        const unsigned char bytes[2] = {static_cast<unsigned char>(v & 0xff), static_cast<unsigned char>(v >> 8)};
        const double f16 = decode(Ty::f16, bytes), bf16 = decode(Ty::bf16, bytes);
        const float h = d::to_f32(rf_f16{static_cast<unsigned short>(v)}), b = d::to_f32(rf_bf16{static_cast<unsigned short>(v)});
        if (std::isnan(f16)) EXPECT_TRUE(std::isnan(h)) << v;
        else ASSERT_EQ(static_cast<double>(h), f16) << "f16 " << v;
        if (std::isnan(bf16)) EXPECT_TRUE(std::isnan(b)) << v;
        else ASSERT_EQ(static_cast<double>(b), bf16) << "bf16 " << v;
    }
    for (unsigned v = 0; v < 256; ++v) {
        const unsigned char byte = static_cast<unsigned char>(v);
        const float e4 = d::to_f32(rf_fp8e4m3{byte}), e5 = d::to_f32(rf_fp8e5m2{byte});
        if ((v & 0x7f) == 0x7f) EXPECT_TRUE(std::isnan(e4)) << v;
        else ASSERT_EQ(static_cast<double>(e4), decode(Ty::e4m3, &byte)) << "e4m3 " << v;
        if ((v & 0x7f) > 0x7c) EXPECT_TRUE(std::isnan(e5)) << v;
        else if ((v & 0x7f) == 0x7c) EXPECT_TRUE(std::isinf(e5) && (e5 < 0) == (v >= 128)) << v;
        else ASSERT_EQ(static_cast<double>(e5), decode(Ty::e5m2, &byte)) << "e5m2 " << v;
        ASSERT_EQ(d::to_f32(static_cast<signed char>(byte)), static_cast<float>(static_cast<signed char>(byte)));
    }
}

// Each list has 49 cases (7 x 7 sizes, rotating K, layouts, alignment, accumulate, alpha, threads,
// A placement); the strides keep the emulated run near 20 s while every combination still occurs.
TEST(CudaGemmEmulated, Bf16TensorCores) { emulate_many<rf_bf16, rf_bf16>(emu_cases(0), false, 2, 0); }
TEST(CudaGemmEmulated, FloatTimesBf16TensorCores) { emulate_many<float, rf_bf16>(emu_cases(1), false, 3, 0); }
TEST(CudaGemmEmulated, Bf16TimesFloatTensorCores) { emulate_many<rf_bf16, float>(emu_cases(2), false, 5, 1); }
TEST(CudaGemmEmulated, F16TensorCores) { emulate_many<rf_f16, rf_f16>(emu_cases(3), false, 4, 1); }
TEST(CudaGemmEmulated, Fp8TensorCores) {
    emulate_many<rf_fp8e4m3, rf_bf16>(emu_cases(4), false, 5, 0);
    emulate_many<rf_f16, rf_fp8e5m2>(emu_cases(5), false, 6, 2);
    emulate_many<signed char, rf_bf16>(emu_cases(6), false, 7, 3);
}
TEST(CudaGemmEmulated, FloatSimt) { emulate_many<float, float>(emu_cases(0), false, 1, 0); }
TEST(CudaGemmEmulated, Int8SimtExact) { emulate_many<signed char, signed char>(emu_cases(1), false, 1, 0); }
TEST(CudaGemmEmulated, SimtEntryPoint) {
    emulate_many<rf_bf16, rf_bf16>(emu_cases(2), true, 4, 0);
    emulate_many<rf_fp8e5m2, float>(emu_cases(3), true, 5, 1);
}

// Shapes around the tile boundaries, split-K groups (more warps than tiles) and many C tiles.
TEST(CudaGemmEmulated, TileBoundariesAndSplitK) {
    const EmuCase cases[] = {
        {128, 128, 128, Lay::kcontig, Lay::kcontig, 0, false, 1.0f, 128},   // one 128x128 tile, cp.async both
        {128, 128, 128, Lay::kcontig, Lay::rcontig, 0, true, 1.0f, 256},    // split K in two groups, B .trans
        {128, 128, 96, Lay::rcontig, Lay::rcontig, 0, false, -2.0f, 512},   // four groups, A .trans
        {256, 64, 40, Lay::kcontig, Lay::rcontig, 0, true, 1.0f, 128},
        {65, 129, 31, Lay::rcontig, Lay::kcontig, 0, false, 1.0f, 64},
        {200, 300, 17, Lay::kcontig, Lay::kcontig, 1, false, 1.0f, 128},    // several C tiles, misaligned
        {16, 256, 64, Lay::kcontig, Lay::rcontig, 0, false, 1.0f, 256},     // attention-like P.V
        {1, 1, 1, Lay::kcontig, Lay::kcontig, 0, true, 3.0f, 32},
        {5, 3, 0, Lay::kcontig, Lay::kcontig, 0, true, 1.0f, 64},           // K = 0: C unchanged
        {5, 3, 0, Lay::kcontig, Lay::kcontig, 0, false, 1.0f, 64},          // K = 0: C = 0
    };
    int i = 0;
    gemm_emu::g_ldsm_phases = 0;
    gemm_emu::g_ldsm_conflicted_phases = 0;
    for (const EmuCase &ec : cases) {
        EXPECT_EQ((emulate_case<rf_bf16, rf_bf16>(ec, false, 77u + static_cast<uint32_t>(i))), "");
        EXPECT_EQ((emulate_case<float, rf_bf16>(ec, false, 99u + static_cast<uint32_t>(i))), "");
        EXPECT_EQ((emulate_case<float, float>(ec, false, 55u + static_cast<uint32_t>(i))), "");
        EXPECT_EQ((emulate_case<signed char, signed char>(ec, false, 33u + static_cast<uint32_t>(i))), "");
        ++i;
    }
    // The swizzles keep every ldmatrix phase (both layouts, both operands) free of bank conflicts.
    EXPECT_GT(gemm_emu::g_ldsm_phases.load(), 0);
    EXPECT_EQ(gemm_emu::g_ldsm_conflicted_phases.load(), 0) << "of " << gemm_emu::g_ldsm_phases.load() << " ldmatrix phases";
}

// Every region size the warp grids produce (rows of A / B regions: 64/64, 64/128, 128/128 by
// default; 32/32, 64/32, 128/128 in the 512-thread configuration) with every pair of operand
// layouts (K-major / MN-major staging: ldmatrix without / with .trans, for A and for B). K = 40
// gives two chunks, the second a tail.
TEST(CudaGemmEmulated, RegionShapesAndLayouts) {
    struct Shape {
        bool wide;
        int threads, M, N;
    };
    const Shape shapes[] = {{false, 32, 64, 64},  {false, 128, 64, 128}, {false, 256, 128, 128},
                            {true, 64, 32, 32},   {true, 128, 64, 32},   {true, 512, 128, 128}};
    const Lay lays[] = {Lay::kcontig, Lay::rcontig};
    uint32_t seed = 900;
    for (const Shape &sh : shapes)
        for (Lay la : lays)
            for (Lay lb : lays) {
                const EmuCase ec{sh.M, sh.N, 40, la, lb, 0, (seed & 1) != 0, 1.0f, sh.threads};
                EXPECT_EQ((emulate_case<rf_bf16, rf_bf16>(ec, false, seed++, sh.wide)), "");
            }
}

// The configuration for up to 512 threads: 32x32 warp tiles (block tiles up to 128x128 with 16 warps),
// 4x4 SIMT micro-tiles; and three pipeline stages.
TEST(CudaGemmEmulated, WideConfiguration) {
    const EmuCase cases[] = {
        {128, 128, 96, Lay::kcontig, Lay::rcontig, 0, true, 1.0f, 512},
        {100, 129, 33, Lay::rcontig, Lay::kcontig, 1, false, 0.5f, 256},
        {7, 64, 64, Lay::kcontig, Lay::kcontig, 0, false, 1.0f, 96},
        {33, 16, 40, Lay::strided, Lay::rcontig, 0, true, 1.0f, 512},
        {32, 32, 64, Lay::rcontig, Lay::rcontig, 0, false, 1.0f, 64},     // 32-row MN-major regions (4 units a row)
        {20, 30, 50, Lay::rcontig, Lay::rcontig, 1, true, 1.0f, 32},
        {64, 32, 48, Lay::kcontig, Lay::rcontig, 0, false, 1.0f, 128},
    };
    uint32_t seed = 500;
    gemm_emu::g_ldsm_phases = 0;
    gemm_emu::g_ldsm_conflicted_phases = 0;
    for (const EmuCase &ec : cases) {
        EXPECT_EQ((emulate_case<rf_bf16, rf_bf16>(ec, false, seed++, true)), "");
        EXPECT_EQ((emulate_case<float, rf_fp8e4m3>(ec, false, seed++, true)), "");
        EXPECT_EQ((emulate_case<float, float>(ec, false, seed++, true)), "");
        EXPECT_EQ((emulate_case<signed char, signed char>(ec, false, seed++, true)), "");
        EXPECT_EQ((emulate_case<rf_f16, rf_bf16>(ec, true, seed++, true)), "");
    }
    EXPECT_EQ(gemm_emu::g_ldsm_conflicted_phases.load(), 0) << "of " << gemm_emu::g_ldsm_phases.load() << " ldmatrix phases";
    // And a spread of the general lists.
    int failures = 0;
    const std::vector<EmuCase> more = emu_cases(4);
    for (size_t i = 0; i < more.size() && failures < 3; i += 4) {
        const std::string r = emulate_case<rf_bf16, float>(more[i], false, seed++, true);
        if (!r.empty()) ADD_FAILURE() << r, ++failures;
    }
}

// ---- fp8 x fp8: the k32 fragments, then whole GEMMs on every route --------------------------------

/** Lane l's m16n8k32 fragments of an e4m3 A (16 x 32, A[m][k]) and B (B[k][n], 32 x 8) as the PTX ISA
 *  lays them out (byte i of a register = element i), or with one plausible mistake. A mistake that
 *  permutes k alike in A and B leaves the product unchanged (both_k16_pairs: what the f16 route of
 *  sm_90 relies on), so the others are made on one operand. */
enum class FragMut { none, swap_a1_a2, a_reversed_bytes, swap_b0_b1, a_k16_pairs, both_k16_pairs };
void fp8_fragments(const unsigned char (&A)[16][32], const unsigned char (&B)[32][8], int l, FragMut mut, unsigned (&a)[4],
                   unsigned (&b)[2]) {
    const int g = l >> 2, t = l & 3;
    // The element's k within its 16-k half: 4t + i; the k16_pairs mistakes read each register as the
    // m16n8k16 layout's two 16-bit pairs would (k 2t, 2t+1, 8+2t, 9+2t).
    auto kk = [&](int i, bool pairs) { return pairs ? 2 * t + (i & 1) + 8 * (i >> 1) : 4 * t + i; };
    const bool a_pairs = mut == FragMut::a_k16_pairs || mut == FragMut::both_k16_pairs, b_pairs = mut == FragMut::both_k16_pairs;
    auto at = [&](int i) { return mut == FragMut::a_reversed_bytes ? 8 * (3 - i) : 8 * i; };
    for (int r = 0; r < 4; ++r) {
        a[r] = 0;
        for (int i = 0; i < 4; ++i) a[r] |= static_cast<unsigned>(A[g + 8 * (r & 1)][16 * (r >> 1) + kk(i, a_pairs)]) << at(i);
    }
    for (int r = 0; r < 2; ++r) {
        b[r] = 0;
        for (int i = 0; i < 4; ++i) b[r] |= static_cast<unsigned>(B[16 * r + kk(i, b_pairs)][g]) << (8 * i);
    }
    if (mut == FragMut::swap_a1_a2) std::swap(a[1], a[2]);
    if (mut == FragMut::swap_b0_b1) std::swap(b[0], b[1]);
}

// The layout the header relies on, in the emulator's terms: (1) ldmatrix.x4 (b16, no .trans) of
// 8-bit rows hands every lane the documented k32 fragments: A stored [m][k] with lane l addressing
// row l & 15, bytes 16 (l >> 4).., B stored [n][k] (the "col" operand) with row l & 7, bytes
// 16 ((l >> 3) & 1)..; (2) the emulated fp8 mma on those fragments is the float64 product, and each
// plausible mistake in building them (row and k halves swapped, bytes reversed, B halves swapped,
// the 16-bit pair order) gives a wrong product, so the GEMM tests below would catch it; the same
// k permutation in A and B does not (the f16 route's k order).
TEST(CudaGemmEmulated, Fp8FragmentsK32) {
    std::mt19937 rng(31);
    unsigned char A[16][32], B[32][8];
    for (auto &row : A)
        for (auto &x : row) random_element(Ty::e4m3, rng, &x);
    for (auto &row : B)
        for (auto &x : row) random_element(Ty::e4m3, rng, &x);
    double want[16][8];
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
            want[m][n] = 0;
            for (int k = 0; k < 32; ++k) want[m][n] += decode(Ty::e4m3, &A[m][k]) * decode(Ty::e4m3, &B[k][n]);
        }
    // (1) 16 rows of A (32 bytes each) at offset 0, then 8 rows of Bᵀ.
    unsigned lds_a[32][4], lds_b[32][4];
    std::vector<std::string> errs = gemm_emu::run_block(32, 1024, {}, [&](unsigned char *scratch) {
        const int l = static_cast<int>(gemm_emu::threadIdx.x);
        if (l == 0) {
            for (int m = 0; m < 16; ++m) std::memcpy(scratch + 32 * m, A[m], 32);
            for (int n = 0; n < 8; ++n)
                for (int k = 0; k < 32; ++k) scratch[512 + 32 * n + k] = B[k][n];
        }
        gemm_emu::__syncthreads();
        gemm_emu::rf_gemm_ptx::ldsm_x4(lds_a[l], static_cast<unsigned>(32 * (l & 15) + 16 * (l >> 4)));
        gemm_emu::rf_gemm_ptx::ldsm_x4(lds_b[l], static_cast<unsigned>(512 + 32 * (l & 7) + 16 * ((l >> 3) & 1)));
    });
    EXPECT_TRUE(errs.empty()) << errs.front();
    for (int l = 0; l < 32; ++l) {
        unsigned a[4], b[2];
        fp8_fragments(A, B, l, FragMut::none, a, b);
        for (int r = 0; r < 4; ++r) EXPECT_EQ(lds_a[l][r], a[r]) << "A register " << r << " of lane " << l;
        for (int r = 0; r < 2; ++r) EXPECT_EQ(lds_b[l][r], b[r]) << "B register " << r << " of lane " << l;
    }
    // (2)
    for (FragMut mut : {FragMut::none, FragMut::swap_a1_a2, FragMut::a_reversed_bytes, FragMut::swap_b0_b1, FragMut::a_k16_pairs,
                        FragMut::both_k16_pairs}) {
        float d[32][4];
        errs = gemm_emu::run_block(32, 16, {}, [&](unsigned char *) {
            const int l = static_cast<int>(gemm_emu::threadIdx.x);
            unsigned a[4], b[2];
            fp8_fragments(A, B, l, mut, a, b);
            for (float &x : d[l]) x = 0.0f;
            gemm_emu::rf_gemm_ptx::mma_fp8<false, false>(d[l], a, b[0], b[1]);
        });
        EXPECT_TRUE(errs.empty()) << errs.front();
        double worst = 0;
        for (int l = 0; l < 32; ++l)
            for (int e = 0; e < 4; ++e) {
                const int m = (l >> 2) + 8 * (e >> 1), n = 2 * (l & 3) + (e & 1);
                worst = std::max(worst, std::fabs(d[l][e] - want[m][n]) / (std::fabs(want[m][n]) + 1e-3));
            }
        if (mut == FragMut::none || mut == FragMut::both_k16_pairs) EXPECT_LT(worst, 1e-6);
        else EXPECT_GT(worst, 1e-3) << "mutation " << static_cast<int>(mut) << " went unnoticed";
    }
}

// Whole GEMMs of fp8 pairs on the fp8 mma (sm_89, sm_120: the host's route), on f16 halves unpacked
// in registers (sm_90, sm_100) and staged as bf16 (sm_80, sm_86): the general lists (awkward M, N
// and K, so K tails of the 64-k chunks; every layout, including row-contiguous operands transposed
// while staging; misaligned; A in shared memory; 32 to 256 threads).
TEST(CudaGemmEmulated, Fp8PairsOnFp8Mma) {
    emulate_many<rf_fp8e4m3, rf_fp8e4m3>(emu_cases(0), false, 3, 0);
    emulate_many<rf_fp8e5m2, rf_fp8e5m2>(emu_cases(1), false, 6, 1);
    emulate_many<rf_fp8e4m3, rf_fp8e5m2>(emu_cases(2), false, 6, 2);
    emulate_many<rf_fp8e5m2, rf_fp8e4m3>(emu_cases(3), false, 6, 3);
}
TEST(CudaGemmEmulated, Fp8PairsUnpackedToF16) {
    emulate_many<rf_fp8e4m3, rf_fp8e4m3>(emu_cases(4), false, 3, 1, Route::fp8_unpack);
    emulate_many<rf_fp8e5m2, rf_fp8e4m3>(emu_cases(5), false, 6, 0, Route::fp8_unpack);
    emulate_many<rf_fp8e4m3, rf_fp8e5m2>(emu_cases(6), false, 6, 4, Route::fp8_unpack);
}
TEST(CudaGemmEmulated, Fp8PairsAsBf16) {
    emulate_many<rf_fp8e4m3, rf_fp8e4m3>(emu_cases(0), false, 7, 2, Route::fp8_off);
    emulate_many<rf_fp8e5m2, rf_fp8e5m2>(emu_cases(1), false, 7, 5, Route::fp8_off);
}

// fp8 pairs around the tile and chunk boundaries (64 k a chunk: K tails of 1, 2, 31, 63...), split-K
// groups, many C tiles, both configurations and both fp8 routes; every ldmatrix phase conflict-free.
TEST(CudaGemmEmulated, Fp8TileBoundariesAndKTails) {
    const EmuCase cases[] = {
        {128, 128, 128, Lay::kcontig, Lay::kcontig, 0, false, 1.0f, 128},   // one tile, two full chunks, cp.async both
        {128, 128, 192, Lay::kcontig, Lay::kcontig, 0, true, 1.0f, 256},    // split K in two groups
        {128, 128, 130, Lay::rcontig, Lay::rcontig, 0, false, -2.0f, 512},  // both transposed while staging, 4 groups
        {200, 72, 65, Lay::kcontig, Lay::rcontig, 0, true, 1.0f, 128},      // several C tiles, K tail 1
        {65, 129, 63, Lay::rcontig, Lay::kcontig, 1, false, 1.0f, 64},      // misaligned: scalar staging, K < one chunk
        {16, 256, 96, Lay::kcontig, Lay::rcontig, 0, false, 1.0f, 256},     // attention-like P.V
        {33, 17, 31, Lay::strided, Lay::negative, 0, true, 0.5f, 96},
        {100, 50, 200, Lay::bcast, Lay::kcontig, 0, false, 1.0f, 32},
        {64, 64, 80, Lay::kcontig, Lay::kcontig, 0, false, 1.0f, 128, true},  // A in shared memory
        {1, 1, 1, Lay::kcontig, Lay::kcontig, 0, true, 3.0f, 32},
        {5, 3, 0, Lay::kcontig, Lay::kcontig, 0, true, 1.0f, 64},           // K = 0: C unchanged
    };
    gemm_emu::g_ldsm_phases = 0;
    gemm_emu::g_ldsm_conflicted_phases = 0;
    uint32_t seed = 4000;
    int i = 0;
    for (const EmuCase &ec : cases) {
        const bool wide = (i % 3) == 2;  // every third case also in the 512-thread configuration
        EXPECT_EQ((emulate_case<rf_fp8e4m3, rf_fp8e4m3>(ec, false, seed++)), "");
        EXPECT_EQ((emulate_case<rf_fp8e5m2, rf_fp8e4m3>(ec, false, seed++, false, Route::fp8_unpack)), "");
        if (wide) {
            EXPECT_EQ((emulate_case<rf_fp8e4m3, rf_fp8e5m2>(ec, false, seed++, true)), "");
            EXPECT_EQ((emulate_case<rf_fp8e4m3, rf_fp8e4m3>(ec, false, seed++, true, Route::fp8_unpack)), "");
        }
        ++i;
    }
    EXPECT_GT(gemm_emu::g_ldsm_phases.load(), 0);
    EXPECT_EQ(gemm_emu::g_ldsm_conflicted_phases.load(), 0) << "of " << gemm_emu::g_ldsm_phases.load() << " ldmatrix phases";
}

// =====================================================================================================
// 2./3. NVRTC compiles and device runs.
// =====================================================================================================

struct Inst {
    const char *ta, *tb, *name;
    Ty a, b;
};
const Inst kInsts[] = {
    {"rf_bf16", "rf_bf16", "bf16_bf16", Ty::bf16, Ty::bf16},
    {"float", "rf_bf16", "f32_bf16", Ty::f32, Ty::bf16},
    {"float", "float", "f32_f32", Ty::f32, Ty::f32},
    {"rf_f16", "rf_f16", "f16_f16", Ty::f16, Ty::f16},
    {"rf_fp8e4m3", "rf_bf16", "e4m3_bf16", Ty::e4m3, Ty::bf16},
    {"signed char", "signed char", "i8_i8", Ty::i8, Ty::i8},
    {"rf_fp8e4m3", "rf_fp8e4m3", "e4m3_e4m3", Ty::e4m3, Ty::e4m3},
    {"rf_fp8e5m2", "rf_fp8e4m3", "e5m2_e4m3", Ty::e5m2, Ty::e4m3},
};
bool is_fp8(Ty t) { return t == Ty::e4m3 || t == Ty::e5m2; }
const int kThreadCounts[] = {128, 256};

/** The header plus one test kernel per instantiation and thread count. Flags: 1 A copied into shared
 *  memory first, 2 C in shared memory (copied in and out), 4 the SIMT entry point. */
std::string device_source() {
    std::ostringstream os;
    os << rf::kEmbeddedCudaGemmHeader << "\n";
    // The fp8 route of each target compiled here: bf16 staging before sm_89, the fp8 mma on sm_89 and
    // sm_120+, f16 halves on sm_90 to sm_110.
    os << "static_assert(rf_gemm_detail::fp8_path<rf_fp8e4m3, rf_fp8e5m2>() == (__CUDA_ARCH__ < 890 ? rf_gemm_detail::kFp8None "
          ": __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200 ? rf_gemm_detail::kFp8Unpack : rf_gemm_detail::kFp8Mma), \"fp8 route\");\n";
    for (int t : kThreadCounts)
        for (const Inst &in : kInsts) {
            os << "extern \"C\" __global__ void __launch_bounds__(" << t << ") gemm_" << in.name << "_" << t
               << "(int M, int N, int K, const " << in.ta << " *a_alloc, long long a_origin, long long a_elems, long long a_si, "
               << "long long a_sk, const " << in.tb << " *b_alloc, long long b_origin, long long b_sj, long long b_sk, float *c, "
               << "long long c_elems, long long c_si, float alpha, int accumulate, int flags) {\n"
               << "    extern __shared__ __align__(16) unsigned char smem[];\n"
               << "    unsigned char *extra = smem + rf_block_gemm_scratch_bytes();\n"
               << "    const " << in.ta << " *a = a_alloc + a_origin;\n"
               << "    float *cc = c;\n"
               << "    if (flags & 1) {\n"
               << "        " << in.ta << " *sa = (" << in.ta << " *)extra;\n"
               << "        for (long long i = threadIdx.x; i < a_elems; i += blockDim.x) sa[i] = a_alloc[i];\n"
               << "        a = sa + a_origin;\n"
               << "        extra += (a_elems * sizeof(" << in.ta << ") + 15) / 16 * 16;\n"
               << "    }\n"
               << "    if (flags & 2) {\n"
               << "        cc = (float *)extra;\n"
               << "        for (long long i = threadIdx.x; i < c_elems; i += blockDim.x) cc[i] = c[i];\n"
               << "    }\n"
               << "    if (flags & 4) rf_block_gemm_simt<" << in.ta << ", " << in.tb << ">(M, N, K, a, a_si, a_sk, b_alloc + b_origin, "
               << "b_sj, b_sk, cc, c_si, alpha, accumulate != 0, smem);\n"
               << "    else rf_block_gemm<" << in.ta << ", " << in.tb << ">(M, N, K, a, a_si, a_sk, b_alloc + b_origin, b_sj, b_sk, "
               << "cc, c_si, alpha, accumulate != 0, smem);\n"
               << "    if (flags & 2)\n"
               << "        for (long long i = threadIdx.x; i < c_elems; i += blockDim.x) c[i] = cc[i];\n"
               << "}\n";
        }
    return os.str();
}

/** Throughput probes: every block runs `reps` 128x128x128 bf16 GEMMs from global memory (L2
 *  resident), accumulating into C in shared memory (as an attention inner loop would) or into its
 *  own C in global memory; with `stages` pipeline stages. */
std::string bench_source(int stages) {
    std::ostringstream os;
    os << "#define RF_GEMM_STAGES " << stages << "\n" << rf::kEmbeddedCudaGemmHeader << "\n";
    os << "extern \"C\" __global__ void __launch_bounds__(128) bench_c_shared(const rf_bf16 *a, const rf_bf16 *b, float *out, "
          "int reps) {\n"
          "    extern __shared__ __align__(16) unsigned char smem[];\n"
          "    float *cs = (float *)(smem + rf_block_gemm_scratch_bytes());\n"
          "    for (int i = threadIdx.x; i < 128 * 136; i += blockDim.x) cs[i] = 0.0f;\n"
          "    const rf_bf16 *ab = a + (long long)(blockIdx.x % 8) * 128 * 128, *bb = b + (long long)(blockIdx.x % 8) * 128 * 128;\n"
          "    for (int r = 0; r < reps; ++r) rf_block_gemm<rf_bf16, rf_bf16>(128, 128, 128, ab, 128, 1, bb, 128, 1, cs, 136, 1.0f, "
          "true, smem);\n"
          "    if (threadIdx.x == 0) out[blockIdx.x] = cs[blockIdx.x % 128];\n"
          "}\n"
          "extern \"C\" __global__ void __launch_bounds__(128) bench_c_global(const rf_bf16 *a, const rf_bf16 *b, float *c, "
          "int reps) {\n"
          "    extern __shared__ __align__(16) unsigned char smem[];\n"
          "    float *cg = c + (long long)blockIdx.x * 128 * 128;\n"
          "    const rf_bf16 *ab = a + (long long)(blockIdx.x % 8) * 128 * 128, *bb = b + (long long)(blockIdx.x % 8) * 128 * 128;\n"
          "    for (int r = 0; r < reps; ++r) rf_block_gemm<rf_bf16, rf_bf16>(128, 128, 128, ab, 128, 1, bb, 128, 1, cg, 128, 1.0f, "
          "r > 0, smem);\n"
          "}\n";
    return os.str();
}

TEST(CudaGemmDevice, CompilesForSm80AndSm90aWithoutSpills) {
    const std::string why = rf::cuda::nvrtc_unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
    const std::string src = device_source();
    const int kScratch = gemm_emu::rf_block_gemm_scratch_bytes();
    for (const char *arch : {"sm_80", "sm_90a"}) {
        rf::cuda::CompiledModule m = rf::cuda::compile(src, arch, {});
        std::printf("%s: compiled in %.0f ms%s\n", arch, m.compile_ms, m.from_cache ? " (cached)" : "");
        for (int t : kThreadCounts)
            for (const Inst &in : kInsts) {
                const std::string name = std::string("gemm_") + in.name + "_" + std::to_string(t);
                auto it = m.kernels.find(name);
                ASSERT_NE(it, m.kernels.end()) << name << " missing from the ptxas report:\n" << m.log;
                const rf::cuda::PtxasReport &r = it->second;
                std::printf("  %-20s %3d registers, shared memory %lld static + %d dynamic (scratch), %lld bytes stack, "
                            "spills %lld/%lld\n",
                            name.c_str(), r.registers, static_cast<long long>(r.shared_bytes), kScratch,
                            static_cast<long long>(r.stack_bytes), static_cast<long long>(r.spill_stores),
                            static_cast<long long>(r.spill_loads));
                EXPECT_EQ(r.spill_stores, 0) << arch << " " << name;
                EXPECT_EQ(r.spill_loads, 0) << arch << " " << name;
                EXPECT_LE(r.registers * t, 65536) << arch << " " << name;
            }
    }
    // The fp8 mma itself (the route of sm_89 and sm_120+; sm_90a above unpacks to f16): it
    // assembles, without spills.
    {
        rf::cuda::CompiledModule m = rf::cuda::compile(src, "sm_89", {});
        for (int t : kThreadCounts)
            for (const Inst &in : kInsts) {
                if (!is_fp8(in.a) || !is_fp8(in.b)) continue;
                const std::string name = std::string("gemm_") + in.name + "_" + std::to_string(t);
                auto it = m.kernels.find(name);
                ASSERT_NE(it, m.kernels.end()) << name << " missing from the ptxas report:\n" << m.log;
                std::printf("  sm_89 %-20s %3d registers, spills %lld/%lld\n", name.c_str(), it->second.registers,
                            static_cast<long long>(it->second.spill_stores), static_cast<long long>(it->second.spill_loads));
                EXPECT_EQ(it->second.spill_stores + it->second.spill_loads, 0) << "sm_89 " << name;
            }
    }
    // Headroom for the caller: with RF_GEMM_LOW_REGISTERS the tensor-core instantiations (all
    // strides run-time values, the worst case) fit in 224 registers without spills (they need
    // ~216), so a generated kernel can keep ~30 registers of its own live across the call.
    std::ostringstream capped;
    capped << "#define RF_GEMM_LOW_REGISTERS 1\n" << rf::kEmbeddedCudaGemmHeader << "\n";
    for (const Inst &in : kInsts) {
        if ((in.a == Ty::f32 && in.b == Ty::f32) || (in.a == Ty::i8 && in.b == Ty::i8)) continue;
        capped << "extern \"C\" __global__ void capped_" << in.name << "(int M, int N, int K, const " << in.ta << " *a, long long a_si, "
               << "long long a_sk, const " << in.tb << " *b, long long b_sj, long long b_sk, float *c, long long c_si, float alpha, "
               << "int acc) {\n    extern __shared__ __align__(16) unsigned char smem[];\n    rf_block_gemm<" << in.ta << ", "
               << in.tb << ">(M, N, K, a, a_si, a_sk, b, b_sj, b_sk, c, c_si, alpha, acc != 0, smem);\n}\n";
    }
    for (const char *arch : {"sm_80", "sm_90a"}) {
        rf::cuda::CompiledModule m = rf::cuda::compile(capped.str(), arch, {"--maxrregcount=224"});
        ASSERT_FALSE(m.kernels.empty()) << m.log;
        for (auto &[name, r] : m.kernels) {
            std::printf("  %s %-20s %3d registers at --maxrregcount=224 (RF_GEMM_LOW_REGISTERS), spills %lld/%lld\n", arch,
                        name.c_str(), r.registers,
                        static_cast<long long>(r.spill_stores), static_cast<long long>(r.spill_loads));
            EXPECT_EQ(r.spill_stores + r.spill_loads, 0) << arch << " " << name << " at 224 registers";
        }
    }
}

/** Runs one case on the device; "" when right. */
std::string device_case(rf::cuda::Module &mod, const Inst &in, int threads, int flags, const EmuCase &ec, uint32_t seed,
                        int64_t smem_optin) {
    Problem p = make_problem(in.a, in.b, ec.M, ec.N, ec.K, ec.la, ec.lb, ec.misalign, ec.accumulate, ec.alpha, seed);
    const size_t c_bytes = p.c0.size() * sizeof(float);
    size_t dyn = static_cast<size_t>(32768);
    if (flags & 1) dyn += (p.a.bytes.size() + 15) / 16 * 16;
    if (flags & 2) dyn += c_bytes;
    if (static_cast<int64_t>(dyn) > smem_optin) return "";  // does not fit: not a case for this variant
    rf::cuda::Buffer a(p.a.bytes.size()), b(p.b.bytes.size()), c(c_bytes);
    a.write(p.a.bytes.data(), p.a.bytes.size());
    b.write(p.b.bytes.data(), p.b.bytes.size());
    c.write(p.c0.data(), c_bytes);
    using rf::cuda::KernelArg;
    mod.launch(std::string("gemm_") + in.name + "_" + std::to_string(threads), 1, static_cast<unsigned>(threads), dyn,
               {KernelArg::i32(p.M), KernelArg::i32(p.N), KernelArg::i32(p.K), KernelArg::buffer(a), KernelArg::i64(p.a.origin),
                KernelArg::i64(static_cast<int64_t>(p.a.elems)), KernelArg::i64(p.a.s_row), KernelArg::i64(p.a.s_k),
                KernelArg::buffer(b), KernelArg::i64(p.b.origin), KernelArg::i64(p.b.s_row), KernelArg::i64(p.b.s_k),
                KernelArg::buffer(c), KernelArg::i64(static_cast<int64_t>(p.c0.size())), KernelArg::i64(p.c_si),
                KernelArg::f32(p.alpha), KernelArg::i32(p.accumulate ? 1 : 0), KernelArg::i32(flags)});
    rf::cuda::synchronize();
    std::vector<float> out(p.c0.size());
    c.read(out.data(), c_bytes);
    const bool int8_pair = in.a == Ty::i8 && in.b == Ty::i8;
    const bool tensor = !(flags & 4) && !int8_pair && !(in.a == Ty::f32 && in.b == Ty::f32);
    const bool f16ok_a = in.a == Ty::f16 || in.a == Ty::e4m3 || in.a == Ty::e5m2 || in.a == Ty::i8;
    const bool f16ok_b = in.b == Ty::f16 || in.b == Ty::e4m3 || in.b == Ty::e5m2 || in.b == Ty::i8;
    const int ct = ((in.a == Ty::f16 || in.b == Ty::f16) && f16ok_a && f16ok_b) ? 2 : 1;
    // The fp8 mma instruction (sm_89, sm_120+) may accumulate inside one mma with fewer bits than
    // fp32 (reported for Hopper's fp8 wgmma); 1e-3 of sum |a||b| until measured. Its other routes
    // are f16 / bf16 mma with exact inputs: 2e-4 like the rest.
    const rf::cuda::DeviceInfo &dev = rf::cuda::device();
    const int cc = dev.cc_major * 10 + dev.cc_minor;
    const bool fp8_mma = tensor && is_fp8(in.a) && is_fp8(in.b) && (cc == 89 || cc >= 120);
    std::string r = check(p, out, tensor, ct, int8_pair, !tensor ? 1e-5 : fp8_mma ? 1e-3 : 2e-4);
    if (r.empty()) return "";
    return describe(in.ta, in.tb, p, ec.la, ec.lb, ec.misalign, threads) + " flags=" + std::to_string(flags) + "\n" + r;
}

TEST(CudaGemmDevice, MatchesReferenceOnDevice) {
    const std::string why = rf::cuda::driver_unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
    const std::string nv = rf::cuda::nvrtc_unavailable_reason();
    if (!nv.empty()) GTEST_SKIP() << nv;
    const rf::cuda::DeviceInfo &dev = rf::cuda::device();
    rf::cuda::CompiledModule cm = rf::cuda::compile(device_source(), rf::cuda::device_arch(), {});
    rf::cuda::Module mod(cm);
    const int sizes[] = {1, 7, 16, 33, 64, 100, 129, 256};
    const Lay lays[] = {Lay::kcontig, Lay::rcontig, Lay::strided, Lay::bcast, Lay::negative};
    int failures = 0, runs = 0;
    uint32_t seed = 1;
    for (const Inst &in : kInsts)
        for (int threads : kThreadCounts) {
            int n = 0;
            for (int M : sizes)
                for (int N : sizes) {
                    // Every (M, N) pair with a rotating K, layouts, alignment, accumulate, alpha and placement.
                    const int K = sizes[(n * 5 + threads / 128) % 8];
                    const EmuCase ec{M, N, K, lays[n % 5], lays[(n / 5 + threads / 128) % 5], n % 4 == 3 ? 1 : 0, n % 3 == 1,
                                     n % 5 == 2 ? 0.5f : 1.0f, threads};
                    const int flags = (n % 7 == 4 ? 1 : 0) | (n % 3 == 2 ? 2 : 0) | (n % 11 == 6 ? 4 : 0);
                    ++n;
                    const std::string r = device_case(mod, in, threads, flags, ec, seed++, dev.smem_per_block_optin);
                    ++runs;
                    if (!r.empty()) {
                        ADD_FAILURE() << r;
                        if (++failures >= 10) return;
                    }
                }
        }
    std::printf("%d device cases on %s\n", runs, dev.name.c_str());
}

TEST(CudaGemmDevice, Bf16ThroughputProbe) {
    const std::string why = rf::cuda::driver_unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
    const rf::cuda::DeviceInfo &dev = rf::cuda::device();
    std::mt19937 rng(5);
    std::vector<uint16_t> host(8 * 128 * 128);
    for (auto &h : host) {
        unsigned char bytes[2];
        random_element(Ty::bf16, rng, bytes);
        std::memcpy(&h, bytes, 2);
    }
    rf::cuda::Buffer a(host.size() * 2), b(host.size() * 2);
    a.write(host.data(), host.size() * 2);
    b.write(host.data(), host.size() * 2);
    const int reps = 64;
    for (int stages : {2, 3}) {
        rf::cuda::CompiledModule cm = rf::cuda::compile(bench_source(stages), rf::cuda::device_arch(), {});
        rf::cuda::Module mod(cm);
        for (bool c_shared : {true, false}) {
            const size_t scratch = static_cast<size_t>(16384 * stages);
            const size_t dyn = scratch + (c_shared ? 128 * 136 * 4 : 0);
            const int per_sm = static_cast<int>(std::min<int64_t>(2, dev.smem_per_sm / static_cast<int64_t>(dyn + 1024)));
            const unsigned blocks = static_cast<unsigned>(dev.sms * std::max(per_sm, 1));
            rf::cuda::Buffer c(static_cast<size_t>(blocks) * 128 * 128 * 4);
            using rf::cuda::KernelArg;
            const std::vector<KernelArg> args = {KernelArg::buffer(a), KernelArg::buffer(b), KernelArg::buffer(c), KernelArg::i32(reps)};
            const char *kernel = c_shared ? "bench_c_shared" : "bench_c_global";
            mod.launch(kernel, blocks, 128, dyn, args);  // warm-up
            rf::cuda::synchronize();
            rf::cuda::Event e0, e1;
            e0.record();
            mod.launch(kernel, blocks, 128, dyn, args);
            e1.record();
            const float ms = rf::cuda::Event::elapsed_ms(e0, e1);
            const double flops = 2.0 * 128 * 128 * 128 * reps * blocks;
            std::printf("bf16 128x128x128 block GEMMs, %d stages, C in %s: %u blocks x %d in %.3f ms = %.1f TFLOP/s (%s, %d "
                        "registers)\n",
                        stages, c_shared ? "shared" : "global", blocks, reps, ms, flops / ms * 1e-9, dev.name.c_str(),
                        cm.kernels.count(kernel) ? cm.kernels.at(kernel).registers : -1);
        }
    }
}

}  // namespace
