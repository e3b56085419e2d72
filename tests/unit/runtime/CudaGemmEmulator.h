/** \file CudaGemmEmulator.h
 * The host emulator of cuda_gemm_test.cpp (included by that one translation unit only): CUDA
 * threads as std::threads, the PTX primitives redfuse_cuda_gemm.h uses implemented from the PTX
 * ISA's definitions, shared-memory race, alignment and bank checks, and the header itself (its three
 * parts, in the order CMake pastes them) compiled inside namespace gemm_emu in two configurations.
 */
#pragma once

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
    int kind = 0;  // mma: 1 bf16, 2 f16, 3 + 2 * (A is e5m2) + (B is e5m2): the 8-bit m16n8k32
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
/** OCP FP8 (the PTX ISA's .e4m3 / .e5m2): e4m3 bias 7, no infinities, S.1111.111 NaN; e5m2 bias 15,
 *  IEEE-style infinities and NaNs. */
double decode_e4m3(unsigned bits) {
    const int s = (bits >> 7) & 1, e = (bits >> 3) & 15, m = bits & 7;
    if (e == 15 && m == 7) return std::nan("");
    const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
    return s ? -v : v;
}
double decode_e5m2(unsigned bits) {
    const int s = (bits >> 7) & 1, e = (bits >> 2) & 31, m = bits & 3;
    const double v = e == 31 ? (m ? std::nan("") : INFINITY) : e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17);
    return s ? -v : v;
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
inline void ldsm_x4(unsigned (&r)[4], unsigned addr) { ldsm_impl(r, addr, false); }

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
/** mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32 with the fragment layouts of the PTX
 *  ISA ("Matrix Fragments for mma.m16n8k32", shared by the 8-bit types), g = lane>>2, t = lane%4, byte i
 *  of a register (low byte first) the i-th element: A: a0..a3 (row g, col 4t+i), a4..a7 (row g+8),
 *  a8..a11 (row g, col 16+4t+i), a12..a15 (row g+8, col 16+4t+i); B: b0..b3 (row 4t+i, col g),
 *  b4..b7 (row 16+4t+i, col g); C/D as for m16n8k16. Exact products, float64 sum, one rounding. */
inline void mma_k32_impl(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, int kind) {
    LaneIn in;
    in.op = 2;
    in.kind = kind;
    for (int i = 0; i < 4; ++i) in.a[i] = a[i], in.c[i] = d[i];
    in.b[0] = b0;
    in.b[1] = b1;
    LaneOut out = collective(in, [](const LaneIn *li, LaneOut *lo) {
        const bool ae5 = ((li[0].kind - 3) & 2) != 0, be5 = ((li[0].kind - 3) & 1) != 0;
        double A[16][32], B[32][8], C[16][8];
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 16; ++i) {
                const unsigned bits = (li[l].a[i / 4] >> (8 * (i & 3))) & 0xffu;
                const int row = g + ((i / 4) & 1) * 8, col = 4 * t + (i & 3) + (i >= 8 ? 16 : 0);
                A[row][col] = ae5 ? decode_e5m2(bits) : decode_e4m3(bits);
            }
            for (int i = 0; i < 8; ++i) {
                const unsigned bits = (li[l].b[i / 4] >> (8 * (i & 3))) & 0xffu;
                B[4 * t + (i & 3) + (i >= 4 ? 16 : 0)][g] = be5 ? decode_e5m2(bits) : decode_e4m3(bits);
            }
            for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = li[l].c[i];
        }
        for (int l = 0; l < 32; ++l) {
            const int g = l >> 2, t = l & 3;
            for (int i = 0; i < 4; ++i) {
                const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
                double s = C[row][col];
                for (int k = 0; k < 32; ++k) s += A[row][k] * B[k][col];
                lo[l].d[i] = static_cast<float>(s);
            }
        }
    });
    for (int i = 0; i < 4; ++i) d[i] = out.d[i];
}
template <bool AE5, bool BE5> inline void mma_fp8(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    mma_k32_impl(d, a, b0, b1, 3 + (AE5 ? 2 : 0) + (BE5 ? 1 : 0));
}
/** cvt.rn.f16x2.{e4m3x2,e5m2x2} on each half of v (the lower byte to the lower half): exact. */
template <bool E5> inline void fp8x4_to_f16x4(unsigned v, unsigned &lo, unsigned &hi) {
    auto f16 = [](unsigned byte) { return encode_f16(static_cast<float>(E5 ? decode_e5m2(byte) : decode_e4m3(byte))); };
    lo = f16(v & 0xffu) | (f16((v >> 8) & 0xffu) << 16);
    hi = f16((v >> 16) & 0xffu) | (f16(v >> 24) << 16);
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
#include "runtime/kernels/redfuse_cuda_gemm_tc.h"
#include "runtime/kernels/redfuse_cuda_gemm_simt.h"

/** The same header in its configuration for blocks of up to 512 threads (32x32 warp tiles, 4x4
 *  SIMT micro-tiles) and with a 3-stage pipeline, with its own element types. */
namespace wide {
#undef REDFUSE_CUDA_GEMM_H
#undef REDFUSE_CUDA_GEMM_TC_H
#undef REDFUSE_CUDA_GEMM_SIMT_H
#undef RF_CUDA_SCALAR_TYPES_DEFINED
#undef RF_GEMM_MAX_THREADS
#undef RF_GEMM_WARP_M
#undef RF_GEMM_WARP_N
#undef RF_GEMM_SIMT_TILE
#undef RF_GEMM_STAGES
#define RF_GEMM_MAX_THREADS 512
#define RF_GEMM_STAGES 3
#include "runtime/kernels/redfuse_cuda_gemm.h"
#include "runtime/kernels/redfuse_cuda_gemm_tc.h"
#include "runtime/kernels/redfuse_cuda_gemm_simt.h"
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
