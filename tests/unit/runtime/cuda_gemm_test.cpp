/** \file cuda_gemm_test.cpp
 * redfuse_cuda_gemm.h (the block-cooperative tile GEMMs of generated CUDA kernels), three ways:
 *
 *  1. Emulated on the host (always runs). The header is compiled as C++ with RF_GEMM_EMULATE: every
 *     CUDA thread of a block is a std::thread, __syncthreads a block barrier, and the PTX primitives
 *     (ldmatrix .x4/.trans, mma.sync m16n8k16 bf16/f16, cp.async with zero fill and wait_group,
 *     cvt.rn.bf16x2/f16x2, dp4a, ld/st.shared) are implemented here from the PTX ISA's definitions
 *     (cross-checked with CuTe's SM75_U32x4_LDSM_N / SM75_U16x8_LDSM_T layouts and CUDA's
 *     __floats2bfloat162_rn), independently of the header. So all of the header's own logic (tile
 *     shapes, swizzles, fragment addressing, tails, the pipeline, split-K) runs against a float64
 *     reference, in the default configuration and in the one for 512 threads with 3 stages. The
 *     emulator also checks what a GPU would not report: every shared word is tracked per barrier
 *     epoch, and a write and another thread's access in the same epoch (a missing barrier or wait)
 *     is an error; cp.async copies land only at cp.async.wait_group; warp collectives must be
 *     reached by all 32 lanes with the same operation (divergence deadlocks and is reported);
 *     addresses must be aligned and inside the scratch (which starts as garbage); every ldmatrix
 *     phase must hit 8 different bank groups.
 *  2. Compiled by NVRTC to cubins for sm_80 and sm_90a (needs NVRTC, no GPU): every instantiation
 *     at 128 and 256 threads without register spills (registers and shared memory printed), and the
 *     tensor-core ones within 224 registers with RF_GEMM_LOW_REGISTERS (headroom for the caller).
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

namespace rf {
extern const char *const kEmbeddedCudaGemmHeader;
}

// =====================================================================================================
// The emulator. Everything the header needs from CUDA lives in namespace gemm_emu, and the header is
// included inside it.
// =====================================================================================================
namespace gemm_emu {

struct Dim {
    unsigned x = 0, y = 1, z = 1;
};
thread_local Dim threadIdx;
Dim blockDim;

struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    return u;
}

/** Errors seen by any emulated thread (the test fails when non-empty). */
struct ErrorLog {
    std::mutex mu;
    std::vector<std::string> list;
    void add(const std::string &e) {
        std::lock_guard<std::mutex> lk(mu);
        if (list.size() < 20) list.push_back(e);
    }
};
ErrorLog g_errors;

/** ldmatrix phases (8 rows of 16 bytes) whose rows share a bank group: each costs extra wavefronts. */
std::atomic<long> g_ldsm_phases{0}, g_ldsm_conflicted_phases{0};

/** A reusable barrier that reports a deadlock (threads that never arrive) instead of hanging. */
class Barrier {
public:
    explicit Barrier(int n) : n_(n) {}
    /** Returns the generation this arrival completed (0, 1, 2, ...). */
    int64_t wait(const char *what) {
        std::unique_lock<std::mutex> lk(mu_);
        const int64_t gen = gen_;
        if (++count_ == n_) {
            count_ = 0;
            ++gen_;
            cv_.notify_all();
            return gen;
        }
        if (!cv_.wait_for(lk, std::chrono::seconds(60), [&] { return gen_ != gen; })) {
            std::fprintf(stderr, "emulator: deadlock at %s (%d of %d threads arrived): divergent barrier or warp "
                                 "collective\n", what, count_, n_);
            std::abort();
        }
        return gen;
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    int n_, count_ = 0;
    int64_t gen_ = 0;
};

/** One operation's inputs and outputs per lane for the warp collectives. */
struct LaneIn {
    int op = 0;  // 1 ldmatrix, 2 mma
    unsigned addr = 0;
    bool trans = false;
    int kind = 0;  // mma: 1 bf16, 2 f16
    unsigned a[4] = {}, b[2] = {};
    float c[4] = {};
};
struct LaneOut {
    unsigned r[4] = {};
    float d[4] = {};
};
struct Warp {
    Barrier bar{32};
    LaneIn in[2][32];
    LaneOut out[2][32];
};

/** Per-32-bit-word access record of the shared scratch for the race check. */
struct WordState {
    int64_t wepoch = -1, repoch = -1;
    int wthread = -1, rthread = -1;  // rthread -2: several readers
};

struct PendingCopy {
    unsigned dst;
    const unsigned char *src;
    int bytes;
    int64_t epoch;
};

/** The block being emulated. */
struct Block {
    int threads = 0;
    unsigned char *scratch = nullptr;
    size_t scratch_bytes = 0;
    std::vector<std::pair<const void *, const void *>> shared_ranges;  // host ranges that count as shared
    std::unique_ptr<Barrier> bar;
    std::atomic<int64_t> epoch{0};
    std::vector<std::unique_ptr<Warp>> warps;
    std::mutex race_mu;
    std::vector<WordState> words;
};
Block *g_block = nullptr;

thread_local int64_t tl_collectives = 0;
thread_local std::vector<PendingCopy> tl_pending;
thread_local std::vector<std::vector<PendingCopy>> tl_groups;

inline int my_tid() { return static_cast<int>(threadIdx.x); }

inline void __syncthreads() {
    const int64_t gen = g_block->bar->wait("__syncthreads");
    int64_t expect = gen;
    g_block->epoch.compare_exchange_strong(expect, gen + 1);  // epoch = completed barrier generations
}

bool smem_range_ok(unsigned addr, int bytes, int align, const char *what) {
    if (addr % static_cast<unsigned>(align) != 0 || addr + static_cast<size_t>(bytes) > g_block->scratch_bytes) {
        std::ostringstream os;
        os << what << ": shared address " << addr << " (" << bytes << " bytes, alignment " << align
           << ") outside the scratch of " << g_block->scratch_bytes << " bytes or misaligned";
        g_errors.add(os.str());
        return false;
    }
    return true;
}

/** Race check of a shared access by thread t of words [addr, addr + bytes) in epochs [from, now]. */
void track(unsigned addr, int bytes, bool write, int64_t from, const char *what) {
    const int t = my_tid();
    const int64_t now = g_block->epoch.load();
    std::lock_guard<std::mutex> lk(g_block->race_mu);
    for (unsigned w = addr / 4; w < (addr + static_cast<unsigned>(bytes) + 3) / 4; ++w) {
        WordState &s = g_block->words[w];
        bool race = false;
        if (s.wepoch >= from && s.wthread != t) race = true;                 // write-write / write-read
        if (write && s.repoch >= from && s.rthread != t) race = true;        // read-write
        if (race) {
            std::ostringstream os;
            os << what << ": race on shared word " << w << " (byte " << 4 * w << ") in barrier epoch " << now
               << ": thread " << t << (write ? " writes" : " reads") << ", thread "
               << (s.wepoch >= from && s.wthread != t ? s.wthread : s.rthread) << " also accessed it";
            g_errors.add(os.str());
        }
        if (write) {
            s.wepoch = now;
            s.wthread = t;
        } else {
            if (s.repoch == now && s.rthread != t) s.rthread = -2;
            else if (s.repoch != now) s.rthread = t;
            s.repoch = now;
        }
    }
}

// ---- PTX ISA semantics used as the reference for the emulator ----------------------------------------

double decode_bf16(unsigned bits) {
    unsigned u = (bits & 0xffffu) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
double decode_f16(unsigned bits) {
    const int s = (bits >> 15) & 1, e = (bits >> 10) & 31, m = bits & 1023;
    double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? std::nan("") : INFINITY) : std::ldexp(1024 + m, e - 25);
    return s ? -v : v;
}
/** Round to nearest even with `sig` significant bits and quantum at least 2^qmin; overflow past max -> inf. */
double round_small(double x, int sig, int qmin, double maxv) {
    if (x == 0 || !std::isfinite(x)) return x;
    int e;
    std::frexp(x, &e);
    const int q = std::max(e - sig, qmin);
    const double v = std::ldexp(std::nearbyint(std::ldexp(x, -q)), q);
    return std::fabs(v) > maxv ? std::copysign(INFINITY, x) : v;
}
const double kBf16Max = 3.38953138925153547590470800371487866880e38, kF16Max = 65504.0;
unsigned encode_bf16(float x) {  // cvt.rn.bf16.f32
    if (std::isnan(x)) return 0x7fffu;
    const float v = static_cast<float>(round_small(x, 8, -133, kBf16Max));
    unsigned u;
    std::memcpy(&u, &v, 4);
    return u >> 16;
}
unsigned encode_f16(float x) {  // cvt.rn.f16.f32
    if (std::isnan(x)) return 0x7fffu;
    const double v = round_small(x, 11, -24, kF16Max);
    const unsigned s = std::signbit(v) ? 0x8000u : 0u;
    const double a = std::fabs(v);
    if (std::isinf(a)) return s | 0x7c00u;
    if (a < std::ldexp(1.0, -14)) return s | static_cast<unsigned>(std::ldexp(a, 24));
    int e;
    const double f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
    return s | (static_cast<unsigned>(e - 1 + 15) << 10) | (static_cast<unsigned>(std::ldexp(f, 11)) - 1024u);
}

namespace rf_gemm_ptx {

inline unsigned smem_u32(const void *p) {
    const unsigned char *c = static_cast<const unsigned char *>(p);
    if (c < g_block->scratch || c >= g_block->scratch + g_block->scratch_bytes) {
        g_errors.add("smem_u32: pointer outside the shared scratch");
        return 0;
    }
    return static_cast<unsigned>(c - g_block->scratch);
}
inline bool is_global(const void *p) {
    for (auto &r : g_block->shared_ranges)
        if (p >= r.first && p < r.second) return false;
    return true;
}
inline void cp_async16(unsigned dst, const void *src, int src_bytes) {
    if (!smem_range_ok(dst, 16, 16, "cp.async dst")) return;
    if (src_bytes < 0 || src_bytes > 16) g_errors.add("cp.async: src-size outside [0, 16]");
    if (reinterpret_cast<uintptr_t>(src) % 16 != 0) g_errors.add("cp.async: source not 16-byte aligned");
    if (!is_global(src)) g_errors.add("cp.async: source in shared memory");
    tl_pending.push_back({dst, static_cast<const unsigned char *>(src), src_bytes, g_block->epoch.load()});
}
inline void cp_async_commit() {
    tl_groups.push_back(std::move(tl_pending));
    tl_pending.clear();
}
/** cp.async.wait_group N: all but the N most recent groups complete; their copies land now, at the
 *  latest moment the PTX model allows. */
template <int N> inline void cp_async_wait() {
    while (tl_groups.size() > static_cast<size_t>(N)) {
        for (const PendingCopy &cp : tl_groups.front()) {
            track(cp.dst, 16, true, cp.epoch, "cp.async");
            unsigned char *d = g_block->scratch + cp.dst;
            std::memset(d, 0, 16);
            if (cp.bytes > 0) std::memcpy(d, cp.src, static_cast<size_t>(cp.bytes));
        }
        tl_groups.erase(tl_groups.begin());
    }
}
inline void st_shared_v4(unsigned addr, uint4 v) {
    if (!smem_range_ok(addr, 16, 16, "st.shared.v4")) return;
    track(addr, 16, true, g_block->epoch.load(), "st.shared.v4");
    std::memcpy(g_block->scratch + addr, &v, 16);
}
inline void st_shared_u32(unsigned addr, unsigned v) {
    if (!smem_range_ok(addr, 4, 4, "st.shared.u32")) return;
    track(addr, 4, true, g_block->epoch.load(), "st.shared.u32");
    std::memcpy(g_block->scratch + addr, &v, 4);
}
inline uint4 ld_shared_v4(unsigned addr) {
    uint4 v{0, 0, 0, 0};
    if (!smem_range_ok(addr, 16, 16, "ld.shared.v4")) return v;
    track(addr, 16, false, g_block->epoch.load(), "ld.shared.v4");
    std::memcpy(&v, g_block->scratch + addr, 16);
    return v;
}

/** Runs a warp collective: every lane deposits `in`, lane 0 computes all outputs with `fn`. */
inline LaneOut collective(const LaneIn &in, const std::function<void(const LaneIn *, LaneOut *)> &fn) {
    const int t = my_tid(), lane = t & 31;
    Warp &w = *g_block->warps[static_cast<size_t>(t >> 5)];
    const int par = static_cast<int>(tl_collectives++ & 1);
    w.in[par][lane] = in;
    w.bar.wait("warp collective");
    if (lane == 0) {
        for (int l = 1; l < 32; ++l)
            if (w.in[par][l].op != w.in[par][0].op || w.in[par][l].trans != w.in[par][0].trans ||
                w.in[par][l].kind != w.in[par][0].kind)
                g_errors.add("warp collective: lanes disagree on the operation (.aligned violated)");
        fn(w.in[par], w.out[par]);
    }
    w.bar.wait("warp collective");
    return w.out[par][lane];
}

/** ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (PTX ISA "Warp-level matrix load instruction"):
 *  lanes 8q..8q+7 give the row addresses of matrix q; lane l receives in register q the elements
 *  (row l/4, columns 2(l%4) and 2(l%4)+1) of matrix q, the lower column in the low half; with .trans
 *  the matrix is read column-major: (rows 2(l%4) and 2(l%4)+1, column l/4) of the stored rows. */
inline void ldsm_impl(unsigned (&r)[4], unsigned addr, bool trans) {
    LaneIn in;
    in.op = 1;
    in.addr = addr;
    in.trans = trans;
    // The rows each lane addresses are read by that lane (for the race check).
    if (smem_range_ok(addr, 16, 16, "ldmatrix row")) track(addr, 16, false, g_block->epoch.load(), "ldmatrix");
    LaneOut out = collective(in, [](const LaneIn *li, LaneOut *lo) {
        auto elem = [&](int q, int row, int col) -> unsigned {
            const unsigned a = li[8 * q + row].addr;
            if (a + 16 > g_block->scratch_bytes) return 0;
            uint16_t v;
            std::memcpy(&v, g_block->scratch + a + 2 * col, 2);
            return v;
        };
        for (int q = 0; q < 4; ++q) {  // bank check: the 8 rows of a matrix in 8 different 16-byte bank groups
            unsigned seen = 0;
            for (int r = 0; r < 8; ++r) seen |= 1u << ((li[8 * q + r].addr / 16) % 8);
            ++g_ldsm_phases;
            if (seen != 0xffu) ++g_ldsm_conflicted_phases;
        }
        for (int l = 0; l < 32; ++l)
            for (int q = 0; q < 4; ++q) {
                unsigned lo16, hi16;
                if (!li[0].trans) {
                    lo16 = elem(q, l / 4, 2 * (l % 4));
                    hi16 = elem(q, l / 4, 2 * (l % 4) + 1);
                } else {
                    lo16 = elem(q, 2 * (l % 4), l / 4);
                    hi16 = elem(q, 2 * (l % 4) + 1, l / 4);
                }
                lo[l].r[q] = lo16 | (hi16 << 16);
            }
    });
    for (int q = 0; q < 4; ++q) r[q] = out.r[q];
}
inline void ldsm_x4_sel(unsigned (&r)[4], unsigned addr, bool trans) { ldsm_impl(r, addr, trans); }

/** mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 with the fragment layouts of the
 *  PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"), g = lane>>2, t = lane%4:
 *  A: a0,a1 (row g, col 2t+i), a2,a3 (row g+8), a4,a5 (row g, col 2t+8+i), a6,a7 (row g+8, col 2t+8+i);
 *  B: b0,b1 (row 2t+i, col g), b2,b3 (row 2t+8+i, col g);  C/D: c0,c1 (row g, col 2t+i), c2,c3 (row g+8).
 *  Products are exact and the sum is formed in float64, then rounded once. */
inline void mma_impl(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, int kind) {
    LaneIn in;
    in.op = 2;
    in.kind = kind;
    for (int i = 0; i < 4; ++i) in.a[i] = a[i], in.c[i] = d[i];
    in.b[0] = b0;
    in.b[1] = b1;
    LaneOut out = collective(in, [](const LaneIn *li, LaneOut *lo) {
        auto dec = [&](unsigned bits) { return li[0].kind == 1 ? decode_bf16(bits) : decode_f16(bits); };
        double A[16][16], B[16][8], C[16][8];
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 8; ++i) {
                const unsigned bits = (li[l].a[i / 2] >> (16 * (i & 1))) & 0xffffu;
                const int row = g + ((i & 2) ? 8 : 0), col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
                A[row][col] = dec(bits);
            }
            for (int i = 0; i < 4; ++i) {
                const unsigned bits = (li[l].b[i / 2] >> (16 * (i & 1))) & 0xffffu;
                B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = dec(bits);
            }
            for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = li[l].c[i];
        }
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 4; ++i) {
                const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
                double s = C[row][col];
                for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
                lo[l].d[i] = static_cast<float>(s);
            }
        }
    });
    for (int i = 0; i < 4; ++i) d[i] = out.d[i];
}
inline void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { mma_impl(d, a, b0, b1, 1); }
inline void mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { mma_impl(d, a, b0, b1, 2); }
inline unsigned pack_bf16x2(float lo, float hi) { return encode_bf16(lo) | (encode_bf16(hi) << 16); }
inline unsigned pack_f16x2(float lo, float hi) { return encode_f16(lo) | (encode_f16(hi) << 16); }
inline int dp4a(int a, int b, int c) {
    int64_t s = c;
    for (int i = 0; i < 4; ++i) s += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
    return static_cast<int>(static_cast<uint32_t>(s));  // wraps like the hardware
}

}  // namespace rf_gemm_ptx

#define RF_GEMM_EMULATE 1
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#include "runtime/kernels/redfuse_cuda_gemm.h"

/** The same header in its configuration for blocks of up to 512 threads (32x32 warp tiles, 4x4
 *  SIMT micro-tiles) and with a 3-stage pipeline, with its own element types. */
namespace wide {
#undef REDFUSE_CUDA_GEMM_H
#undef RF_CUDA_SCALAR_TYPES_DEFINED
#undef RF_GEMM_MAX_THREADS
#undef RF_GEMM_WARP_M
#undef RF_GEMM_WARP_N
#undef RF_GEMM_SIMT_TILE
#undef RF_GEMM_STAGES
#define RF_GEMM_MAX_THREADS 512
#define RF_GEMM_STAGES 3
#include "runtime/kernels/redfuse_cuda_gemm.h"
}  // namespace wide
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__

/** Runs `body` as one block of `threads` emulated CUDA threads over a fresh scratch of `scratch_bytes`
 *  (exactly what the configuration under test declares); returns the errors. */
std::vector<std::string> run_block(int threads, size_t scratch_bytes,
                                   const std::vector<std::pair<const void *, const void *>> &shared_ranges,
                                   const std::function<void(unsigned char *scratch)> &body) {
    Block blk;
    blk.threads = threads;
    blk.scratch_bytes = scratch_bytes;
    std::vector<unsigned char> scratch(blk.scratch_bytes, 0xcd);  // garbage: the GEMM must not read unwritten scratch
    blk.scratch = scratch.data();
    blk.shared_ranges = shared_ranges;
    blk.shared_ranges.push_back({scratch.data(), scratch.data() + scratch.size()});
    blk.bar = std::make_unique<Barrier>(threads);
    for (int w = 0; w < threads / 32; ++w) blk.warps.push_back(std::make_unique<Warp>());
    blk.words.assign(blk.scratch_bytes / 4, WordState{});
    g_block = &blk;
    blockDim.x = static_cast<unsigned>(threads);
    {
        std::lock_guard<std::mutex> lk(g_errors.mu);
        g_errors.list.clear();
    }
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([t, &body, &blk] {
            threadIdx.x = static_cast<unsigned>(t);
            body(blk.scratch);
            bool unwaited = !tl_pending.empty();
            for (auto &grp : tl_groups) unwaited |= !grp.empty();
            if (unwaited) g_errors.add("cp.async copies never waited for");
        });
    for (auto &th : pool) th.join();
    g_block = nullptr;
    return g_errors.list;
}

}  // namespace gemm_emu

// =====================================================================================================
// Host-side data, layouts and the float64 reference (shared by the emulated and the device runs).
// =====================================================================================================
namespace gemm_check {

enum class Ty { f32, bf16, f16, e4m3, e5m2, i8 };
const char *ty_name(Ty t) {
    switch (t) {
    case Ty::f32: return "float";
    case Ty::bf16: return "rf_bf16";
    case Ty::f16: return "rf_f16";
    case Ty::e4m3: return "rf_fp8e4m3";
    case Ty::e5m2: return "rf_fp8e5m2";
    case Ty::i8: return "signed char";
    }
    return "?";
}
size_t ty_bytes(Ty t) { return t == Ty::f32 ? 4 : (t == Ty::bf16 || t == Ty::f16) ? 2 : 1; }

/** Independent decoders (ldexp-based, unlike the header's bit tricks). */
double decode(Ty t, const unsigned char *p) {
    switch (t) {
    case Ty::f32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
    case Ty::bf16: {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return gemm_emu::decode_bf16(b);
    }
    case Ty::f16: {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return gemm_emu::decode_f16(b);
    }
    case Ty::e4m3: {
        const int s = p[0] >> 7, e = (p[0] >> 3) & 15, m = p[0] & 7;
        const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
        return s ? -v : v;
    }
    case Ty::e5m2: {
        const int s = p[0] >> 7, e = (p[0] >> 2) & 31, m = p[0] & 3;
        const double v = e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17);
        return s ? -v : v;
    }
    case Ty::i8: return static_cast<int8_t>(p[0]);
    }
    return 0;
}

/** A random element of type t (finite; fp8 NaN/inf codes excluded). */
void random_element(Ty t, std::mt19937 &rng, unsigned char *p) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    switch (t) {
    case Ty::f32: {
        const float f = nd(rng);
        std::memcpy(p, &f, 4);
        break;
    }
    case Ty::bf16: {
        const uint16_t b = static_cast<uint16_t>(gemm_emu::encode_bf16(nd(rng)));
        std::memcpy(p, &b, 2);
        break;
    }
    case Ty::f16: {
        const uint16_t b = static_cast<uint16_t>(gemm_emu::encode_f16(nd(rng)));
        std::memcpy(p, &b, 2);
        break;
    }
    case Ty::e4m3: {
        unsigned v;
        do v = rng() & 0xffu;
        while ((v & 0x7fu) == 0x7fu);
        p[0] = static_cast<unsigned char>(v);
        break;
    }
    case Ty::e5m2: {
        unsigned v;
        do v = rng() & 0xffu;
        while ((v & 0x7fu) >= 0x7cu);
        p[0] = static_cast<unsigned char>(v);
        break;
    }
    case Ty::i8: p[0] = static_cast<unsigned char>(rng() & 0xffu); break;
    }
}

/** Operand layouts: how A(i,k) / B(k,j) sit in memory. */
enum class Lay {
    kcontig,   // k stride 1, row stride = K + pad   (B: the "transposed" Bᵀ[n][k] form)
    rcontig,   // row stride 1, k stride = rows + pad (B: plain B[k][n])
    strided,   // k stride 2, row stride 2K + 3
    bcast,     // row stride 0 (every row the same), k stride 1
    negative,  // k stride -1, row stride K (rows forward, k backward)
};
const char *lay_name(Lay l) {
    switch (l) {
    case Lay::kcontig: return "k-contiguous";
    case Lay::rcontig: return "row-contiguous";
    case Lay::strided: return "strided";
    case Lay::bcast: return "broadcast";
    case Lay::negative: return "negative-k";
    }
    return "?";
}

/** A matrix operand (rows x K) in its memory layout: bytes, element offset of (0,0), strides. */
struct Operand {
    Ty ty = Ty::f32;
    int rows = 0, K = 0;
    long long s_row = 0, s_k = 0, origin = 0;  // element (r,k) at origin + r*s_row + k*s_k
    size_t elems = 0;
    std::vector<unsigned char> bytes;
    double at(int r, int k) const {
        return decode(ty, bytes.data() + static_cast<size_t>(origin + r * s_row + k * s_k) * ty_bytes(ty));
    }
};

Operand make_operand(Ty ty, int rows, int K, Lay lay, int misalign, std::mt19937 &rng) {
    Operand op;
    op.ty = ty;
    op.rows = rows;
    op.K = K;
    const int pad = 3;
    switch (lay) {
    case Lay::kcontig: op.s_k = 1, op.s_row = K + ((rows > 1) ? (misalign ? pad : 8) : 0); break;
    case Lay::rcontig: op.s_row = 1, op.s_k = rows + ((K > 1) ? (misalign ? pad : 8) : 0); break;
    case Lay::strided: op.s_k = 2, op.s_row = 2LL * K + 3; break;
    case Lay::bcast: op.s_row = 0, op.s_k = 1; break;
    case Lay::negative: op.s_k = -1, op.s_row = K; break;
    }
    long long lo = 0, hi = 0;
    for (long long r : {0LL, static_cast<long long>(rows - 1)})
        for (long long k : {0LL, static_cast<long long>(K - 1)}) {
            lo = std::min(lo, r * op.s_row + k * op.s_k);
            hi = std::max(hi, r * op.s_row + k * op.s_k);
        }
    // Aligned layouts start 64 bytes in; misaligned ones one element later.
    const long long lead = 64 / static_cast<long long>(ty_bytes(ty)) + misalign;
    op.origin = lead - lo;
    op.elems = static_cast<size_t>(op.origin + hi + 1 + 16);
    op.bytes.assign(op.elems * ty_bytes(ty), 0);
    for (size_t e = 0; e < op.elems; ++e) random_element(ty, rng, op.bytes.data() + e * ty_bytes(ty));
    return op;
}

/** The staging rounding of the tensor-core path: value as the mma sees it. */
double staged(double v, int ct_kind, bool tensor) {
    if (!tensor) return v;
    return ct_kind == 2 ? gemm_emu::round_small(v, 11, -24, gemm_emu::kF16Max)
                        : gemm_emu::round_small(v, 8, -133, gemm_emu::kBf16Max);
}

struct Problem {
    int M = 0, N = 0, K = 0;
    Operand a, b;
    long long c_si = 0;
    int c_rows = 0;
    float alpha = 1.0f;
    bool accumulate = false;
    std::vector<float> c0;  // initial C (NaN where unread; sentinel in the padding)
};

const float kSentinel = -12345.0f;

Problem make_problem(Ty ta, Ty tb, int M, int N, int K, Lay la, Lay lb, int misalign, bool accumulate, float alpha,
                     uint32_t seed) {
    std::mt19937 rng(seed);
    Problem p;
    p.M = M;
    p.N = N;
    p.K = K;
    p.a = make_operand(ta, M, K, la, misalign, rng);
    p.b = make_operand(tb, N, K, lb, misalign, rng);
    p.c_si = N + 5;
    p.c_rows = M + 1;
    p.alpha = alpha;
    p.accumulate = accumulate;
    p.c0.assign(static_cast<size_t>(p.c_rows * p.c_si), kSentinel);
    std::uniform_int_distribution<int> small(-8, 8);
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j)
            p.c0[static_cast<size_t>(i * p.c_si + j)] =
                accumulate ? static_cast<float>(small(rng)) * 0.5f : std::numeric_limits<float>::quiet_NaN();
    return p;
}

/** Compares C with the float64 reference of the staged (rounded) inputs; "" when it matches. */
std::string check(const Problem &p, const std::vector<float> &c, bool tensor, int ct_kind, bool exact, double rel) {
    std::ostringstream os;
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < p.c_rows; ++i)
        for (long long j = 0; j < p.c_si; ++j) {
            const size_t idx = static_cast<size_t>(i * p.c_si + j);
            if (i >= p.M || j >= p.N) {
                if (!(c[idx] == kSentinel) && bad++ < 4) os << "  padding C[" << i << "][" << j << "] changed to " << c[idx] << "\n";
                continue;
            }
            double s = 0, mag = 0, s_unrounded = 0;
            for (int k = 0; k < p.K; ++k) {
                const double x = staged(p.a.at(i, k), ct_kind, tensor), y = staged(p.b.at(static_cast<int>(j), k), ct_kind, tensor);
                s += x * y;
                mag += std::fabs(x * y);
                s_unrounded += p.a.at(i, k) * p.b.at(static_cast<int>(j), k);
            }
            const double c0 = p.accumulate ? p.c0[idx] : 0.0;
            const double want = c0 + p.alpha * s;
            const double tol = exact ? 0.0 : rel * std::fabs(p.alpha) * mag + 4e-7 * std::fabs(want) + 1e-30;
            const double err = std::fabs(c[idx] - want);
            // The brief's looser check against the unrounded inputs (1e-2 of sum |a||b|) must hold too.
            const double err_unrounded = std::fabs(c[idx] - (c0 + p.alpha * s_unrounded));
            const bool ok = exact ? (static_cast<double>(c[idx]) == want)
                                  : (err <= tol && err_unrounded <= 1e-2 * std::fabs(p.alpha) * mag + 4e-7 * std::fabs(want) + 1e-30);
            if (!exact && mag > 0) worst = std::max(worst, err / (std::fabs(p.alpha) * mag));
            if (!ok && bad++ < 4)
                os << "  C[" << i << "][" << j << "] = " << c[idx] << ", want " << want << " (err " << err << ", tol " << tol << ")\n";
        }
    if (bad == 0) return "";
    std::ostringstream head;
    head << bad << " wrong elements (worst relative error " << worst << ")\n" << os.str();
    return head.str();
}

std::string describe(const char *ta, const char *tb, const Problem &p, Lay la, Lay lb, int misalign, int threads) {
    std::ostringstream os;
    os << "<" << ta << ", " << tb << "> M=" << p.M << " N=" << p.N << " K=" << p.K << " A " << lay_name(la) << " B "
       << lay_name(lb) << (misalign ? " misaligned" : "") << (p.accumulate ? " accumulate" : "") << " alpha=" << p.alpha
       << " threads=" << threads;
    return os.str();
}

template <class T> constexpr Ty ty_of();
template <> constexpr Ty ty_of<float>() { return Ty::f32; }
template <> constexpr Ty ty_of<gemm_emu::rf_bf16>() { return Ty::bf16; }
template <> constexpr Ty ty_of<gemm_emu::rf_f16>() { return Ty::f16; }
template <> constexpr Ty ty_of<gemm_emu::rf_fp8e4m3>() { return Ty::e4m3; }
template <> constexpr Ty ty_of<gemm_emu::rf_fp8e5m2>() { return Ty::e5m2; }
template <> constexpr Ty ty_of<signed char>() { return Ty::i8; }

}  // namespace gemm_check

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

/** Runs one case of rf_block_gemm<TA,TB> (or the SIMT path alone; or the wide configuration) in the
 *  emulator; "" when right. */
template <class TA, class TB>
std::string emulate_case(const EmuCase &ec, bool simt_only, uint32_t seed, bool wide = false) {
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
    // Float SIMT: 1e-5 of sum |a||b| (the brief); tensor path: inputs rounded alike, so only fp32
    // accumulation differs: 2e-4 (and the brief's 1e-2 against the unrounded inputs).
    out += check(p, c, tensor, Sel::ct, exact, tensor ? 2e-4 : 1e-5);
    if (out.empty()) return "";
    return describe(ty_name(ta), ty_name(tb), p, ec.la, ec.lb, ec.misalign, ec.threads) + (simt_only ? " (simt)" : "") +
           (wide ? " (RF_GEMM_MAX_THREADS 512)" : "") +
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
void emulate_many(const std::vector<EmuCase> &cases, bool simt_only, int stride, int offset) {
    int failures = 0;
    for (size_t i = static_cast<size_t>(offset); i < cases.size(); i += static_cast<size_t>(stride)) {
        const std::string r = emulate_case<TA, TB>(cases[i], simt_only, 1000u + static_cast<uint32_t>(i));
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
};
const int kThreadCounts[] = {128, 256};

/** The header plus one test kernel per instantiation and thread count. Flags: 1 A copied into shared
 *  memory first, 2 C in shared memory (copied in and out), 4 the SIMT entry point. */
std::string device_source() {
    std::ostringstream os;
    os << rf::kEmbeddedCudaGemmHeader << "\n";
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
    std::string r = check(p, out, tensor, ct, int8_pair, tensor ? 2e-4 : 1e-5);
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
