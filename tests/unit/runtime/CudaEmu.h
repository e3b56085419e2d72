/** \file CudaEmu.h
 * A host emulation of the CUDA execution model for tests: one block at a time, its threads as
 * fibers on the calling thread, __syncthreads, warp collectives (__syncwarp, __shfl_*_sync), the
 * PTX primitives of redfuse_cuda_gemm.h implemented from the PTX ISA, and shared-memory race,
 * alignment and bank checks on what those primitives touch. Included by cuda_gemm_test.cpp (through
 * CudaGemmEmulator.h) and pasted into the generated kernels that CudaEmuDevice.cpp compiles.
 *
 * Why fibers rather than std::threads: a block is 128 to 1024 threads that meet at a barrier every
 * few statements; on the two CI cores, OS threads pay a futex wake-up per thread per barrier, while
 * a fiber switch is a register swap. Fibers also make a run deterministic (the order in which the
 * threads released by a barrier resume is chosen by a seeded shuffle, so a missing barrier shows up
 * as a wrong value rather than a rare flake), and a deadlock (a divergent barrier, a warp collective
 * some lane never reaches) is reported at once instead of after a timeout.
 */
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace cuda_emu {

// ---- Fiber switching. On x86-64 a stack switch in a few instructions (glibc's swapcontext makes a
// signal-mask system call per switch, which was 80% of a run); elsewhere ucontext.
#if defined(__x86_64__)
struct Context {
    void *sp = nullptr;
};
/** Saves where the current fiber stands into `from` and continues `to`. Every other register is
 *  declared clobbered, so the compiler keeps nothing live in them across the switch; the 128 bytes
 *  below the stack pointer (the caller's red zone) are stepped over before pushing. */
inline void switch_context(Context &from, Context &to) {
    void **save = &from.sp;
    void *next = to.sp;
    asm volatile(
        "subq $128, %%rsp\n\t"
        "leaq 1f(%%rip), %%rax\n\t"
        "pushq %%rax\n\t"
        "pushq %%rbp\n\t"
        "movq %%rsp, (%0)\n\t"
        "movq %1, %%rsp\n\t"
        "popq %%rbp\n\t"
        "ret\n\t"
        "1:\n\t"
        "addq $128, %%rsp\n\t"
        : "+D"(save), "+S"(next)
        :
        : "rax", "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "memory", "cc", "xmm0",
          "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
          "xmm14", "xmm15");
}
/** A context that starts `entry` (which must never return) on the stack [lo, lo + bytes). */
inline Context start_context(char *lo, size_t bytes, void (*entry)(), Context *) {
    uintptr_t top = (reinterpret_cast<uintptr_t>(lo) + bytes) & ~uintptr_t(15);
    void **sp = reinterpret_cast<void **>(top);
    *--sp = nullptr;                             // entry's return address: never used
    *--sp = reinterpret_cast<void *>(entry);     // where the first switch's `ret` goes
    *--sp = nullptr;                             // rbp
    return Context{sp};                          // entry starts with rsp = 8 (mod 16), as after a call
}
#else
struct Context {
    ucontext_t uc;
};
inline void switch_context(Context &from, Context &to) { swapcontext(&from.uc, &to.uc); }
inline Context start_context(char *lo, size_t bytes, void (*entry)(), Context *link) {
    Context c;
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = lo;
    c.uc.uc_stack.ss_size = bytes;
    c.uc.uc_link = &link->uc;
    makecontext(&c.uc, entry, 0);
    return c;
}
#endif

struct Dim {
    unsigned x = 0, y = 1, z = 1;
};
/** The running thread's indices: plain globals that the scheduler rewrites at every switch. */
inline Dim threadIdx, blockIdx, blockDim, gridDim;

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
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
template <class To, class From> inline To bits_as(From v) {
    static_assert(sizeof(To) == sizeof(From));
    To t;
    std::memcpy(&t, &v, sizeof t);
    return t;
}
inline float __uint_as_float(unsigned u) { return bits_as<float>(u); }
inline float __int_as_float(int i) { return bits_as<float>(i); }
inline unsigned __float_as_uint(float f) { return bits_as<unsigned>(f); }
inline int __float_as_int(float f) { return bits_as<int>(f); }

/** Errors seen by any emulated thread (a test fails when the list is not empty). Every fiber runs on
 *  the thread that runs the block: no lock. */
struct ErrorLog {
    std::vector<std::string> list;
    void add(const std::string &e) {
        if (list.size() < 20) list.push_back(e);
    }
};
inline ErrorLog g_errors;

/** ldmatrix phases (8 rows of 16 bytes) whose rows share a bank group: each costs extra wavefronts. */
inline std::atomic<long> g_ldsm_phases{0}, g_ldsm_conflicted_phases{0};

/** One warp collective's inputs and outputs per lane. */
struct LaneIn {
    int op = 0;  // 1 ldmatrix, 2 mma, 3 shuffle, 4 __syncwarp
    unsigned addr = 0;
    bool trans = false;
    int kind = 0;  // mma: 1 bf16, 2 f16, 3 + 2 * (A is e5m2) + (B is e5m2): the 8-bit m16n8k32; shuffle: its mode
    unsigned a[4] = {}, b[2] = {};
    float c[4] = {};
};
struct LaneOut {
    unsigned r[4] = {};
    float d[4] = {};
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

/** One emulated CUDA thread: its fiber and what CUDA keeps per thread. */
struct Thread {
    enum State { Ready, AtBarrier, AtWarp, Done };
    int tid = 0;
    State state = Ready;
    Context ctx;
    int barrier_line = 0;                   // the __syncthreads it waits at (0: not known)
    std::vector<PendingCopy> pending;       // cp.async since the last commit
    std::vector<std::vector<PendingCopy>> groups;
};

struct Warp {
    int arrived = 0;
    LaneIn in[32];
    LaneOut out[32];
};

/** Fiber stacks, kept between blocks (a block of 1024 threads needs 1024 of them). */
class StackPool {
public:
    static constexpr size_t kBytes = 256 * 1024, kGuard = 4096;
    ~StackPool() {
        for (void *p : stacks_) munmap(p, kBytes + kGuard);
    }
    /** The stack of fiber i (its usable part, above a guard page that turns an overflow into a fault). */
    char *get(size_t i) {
        while (stacks_.size() <= i) {
            void *p = mmap(nullptr, kBytes + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                std::fprintf(stderr, "emulator: cannot map a fiber stack\n");
                std::abort();
            }
            mprotect(p, kGuard, PROT_NONE);
            stacks_.push_back(p);
        }
        return static_cast<char *>(stacks_[i]) + kGuard;
    }

private:
    std::vector<void *> stacks_;
};
inline StackPool g_stacks;

/** The block being emulated. */
struct Block {
    int threads = 0;
    unsigned char *scratch = nullptr;  // the shared memory the PTX primitives address (0 = its first byte)
    size_t scratch_bytes = 0;
    std::vector<std::pair<const void *, const void *>> shared_ranges;  // host ranges that count as shared
    int64_t epoch = 0;  // completed block barriers
    std::vector<Thread> th;
    std::vector<Warp> warps;
    std::vector<WordState> words;
    void (*body)(void *) = nullptr;
    void *body_arg = nullptr;
    Context sched;
    Thread *cur = nullptr;
    std::deque<int> ready;
    int live = 0, at_barrier = 0;
    uint64_t order = 0;  // the state of the generator that orders the threads a barrier releases
};
inline Block *g_block = nullptr;

inline Thread &me() { return *g_block->cur; }
inline int my_tid() { return me().tid; }

/** Queues the given threads in a shuffled order (a missing barrier then reads what is not yet written). */
inline void make_ready(std::vector<int> &ids) {
    for (size_t i = ids.size(); i > 1; i--) {  // Fisher-Yates with splitmix64
        uint64_t z = (g_block->order += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        std::swap(ids[i - 1], ids[(z ^ (z >> 31)) % i]);
    }
    for (int i : ids) {
        g_block->th[static_cast<size_t>(i)].state = Thread::Ready;
        g_block->ready.push_back(i);
    }
}

/** Back to the scheduler (the current thread has blocked or finished). */
inline void yield() {
    Thread &t = me();
    switch_context(t.ctx, g_block->sched);
    // Resumed by the scheduler, which has set g_block->cur and the indices.
}

/** Completes the block barrier when every live thread waits at it. */
inline void try_release_barrier() {
    Block &b = *g_block;
    if (b.at_barrier == 0 || b.at_barrier != b.live) return;
    std::vector<int> ids;
    int line = 0;
    for (Thread &t : b.th) {
        if (t.state != Thread::AtBarrier) continue;
        if (t.barrier_line && line && t.barrier_line != line) {
            g_errors.add("__syncthreads: threads of one barrier wait at different calls (source lines " + std::to_string(line) +
                         " and " + std::to_string(t.barrier_line) + "): a barrier in divergent code");
        }
        if (t.barrier_line) line = t.barrier_line;
        ids.push_back(t.tid);
    }
    b.at_barrier = 0;
    b.epoch++;
    make_ready(ids);
}

/** __syncthreads (line: the call's source line, for the divergence check; 0 when unknown). Threads
 *  that have returned count as arrived, as on the hardware. */
inline void sync_block(int line = 0) {
    Thread &t = me();
    t.state = Thread::AtBarrier;
    t.barrier_line = line;
    g_block->at_barrier++;
    try_release_barrier();
    yield();
}
inline void __syncthreads() { sync_block(0); }

/** Runs a warp collective: every lane deposits `in`; when the 32th arrives, `fn` computes every
 *  lane's output from all inputs. Lanes must agree on the operation (.aligned / .sync semantics);
 *  a lane that returned or waits elsewhere leaves the others blocked, which the scheduler reports. */
inline LaneOut collective(const LaneIn &in, void (*fn)(const LaneIn *, LaneOut *)) {
    Thread &t = me();
    const int lane = t.tid & 31;
    Warp &w = g_block->warps[static_cast<size_t>(t.tid >> 5)];
    w.in[lane] = in;
    t.state = Thread::AtWarp;
    if (++w.arrived == 32) {
        for (int l = 1; l < 32; ++l)
            if (w.in[l].op != w.in[0].op || w.in[l].trans != w.in[0].trans || w.in[l].kind != w.in[0].kind)
                g_errors.add("warp collective: lanes disagree on the operation (.aligned / .sync violated)");
        fn(w.in, w.out);
        w.arrived = 0;
        std::vector<int> ids;
        for (int l = 0; l < 32; ++l) ids.push_back((t.tid & ~31) + l);
        make_ready(ids);
    }
    yield();
    return w.out[lane];
}

inline void check_full_mask(unsigned mask, const char *what) {
    if (mask != 0xffffffffu) g_errors.add(std::string(what) + ": the emulator supports full-warp masks only");
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    check_full_mask(mask, "__syncwarp");
    LaneIn in;
    in.op = 4;
    collective(in, [](const LaneIn *, LaneOut *) {});
}
/** __shfl_sync / __shfl_xor_sync / __shfl_up_sync / __shfl_down_sync on 4- or 8-byte values
 *  (mode 0 idx, 1 xor, 2 up, 3 down; width a power of two up to 32, as in the CUDA guide). */
template <class T> inline T shuffle(unsigned mask, T v, int arg, int width, int mode, const char *what) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "shuffles of 4- and 8-byte values");
    check_full_mask(mask, what);
    LaneIn in;
    in.op = 3;
    in.kind = mode;
    std::memcpy(in.a, &v, sizeof(T));
    in.b[0] = static_cast<unsigned>(arg);
    in.b[1] = static_cast<unsigned>(width);
    LaneOut out = collective(in, [](const LaneIn *li, LaneOut *lo) {
        for (int l = 0; l < 32; ++l) {
            const int arg = static_cast<int>(li[l].b[0]), width = static_cast<int>(li[l].b[1]);
            const int base = l & ~(width - 1), sub = l - base;
            int src = l;
            if (li[l].kind == 0) src = base + (arg & (width - 1));
            else if (li[l].kind == 1) src = (l ^ arg) < base + width ? l ^ arg : l;
            else if (li[l].kind == 2) src = sub - arg >= 0 ? l - arg : l;
            else src = sub + arg < width ? l + arg : l;
            std::memcpy(lo[l].r, li[src].a, 8);
        }
    });
    T r;
    std::memcpy(&r, out.r, sizeof(T));
    return r;
}
template <class T> inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return shuffle(m, v, src, w, 0, "__shfl_sync"); }
template <class T> inline T __shfl_xor_sync(unsigned m, T v, int x, int w = 32) { return shuffle(m, v, x, w, 1, "__shfl_xor_sync"); }
template <class T> inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return shuffle(m, v, int(d), w, 2, "__shfl_up_sync"); }
template <class T> inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return shuffle(m, v, int(d), w, 3, "__shfl_down_sync"); }

/** The fiber entry: runs the body as the current thread, then hands back to the scheduler. */
inline void fiber_main() {
    Thread &t = me();
    g_block->body(g_block->body_arg);
    bool unwaited = !t.pending.empty();
    for (auto &grp : t.groups) unwaited |= !grp.empty();
    if (unwaited) g_errors.add("cp.async copies never waited for");
    t.state = Thread::Done;
    g_block->live--;
    try_release_barrier();
    switch_context(t.ctx, g_block->sched);  // never resumed
    std::abort();
}

/** Runs `body` as one block of `threads` emulated threads with block index `block`, over `scratch`
 *  (the shared memory; `shared_ranges` other host ranges that count as shared for the GEMM's checks).
 *  `seed` picks the order in which threads released by a barrier resume. Returns false on a deadlock
 *  (reported in g_errors; the blocked threads are abandoned). One block at a time per process. */
inline bool run_fibers(int threads, Dim block, unsigned char *scratch, size_t scratch_bytes,
                       const std::vector<std::pair<const void *, const void *>> &shared_ranges,
                       void (*body)(void *), void *body_arg, uint32_t seed) {
    Block blk;
    blk.threads = threads;
    blk.scratch = scratch;
    blk.scratch_bytes = scratch_bytes;
    blk.shared_ranges = shared_ranges;
    blk.shared_ranges.push_back({scratch, scratch + scratch_bytes});
    blk.words.assign(scratch_bytes / 4, WordState{});
    blk.body = body;
    blk.body_arg = body_arg;
    blk.order = seed;
    blk.th.resize(static_cast<size_t>(threads));
    blk.warps.resize(static_cast<size_t>((threads + 31) / 32));
    blk.live = threads;
    g_block = &blk;
    blockIdx = block;
    blockDim = Dim{static_cast<unsigned>(threads), 1, 1};
    std::vector<int> ids;
    for (int i = 0; i < threads; ++i) {
        Thread &t = blk.th[static_cast<size_t>(i)];
        t.tid = i;
        t.ctx = start_context(g_stacks.get(static_cast<size_t>(i)), StackPool::kBytes, fiber_main, &blk.sched);
        ids.push_back(i);
    }
    make_ready(ids);
    bool ok = true;
    while (blk.live > 0) {
        if (blk.ready.empty()) {
            int bar = 0, warp = 0;
            for (const Thread &t : blk.th) bar += t.state == Thread::AtBarrier, warp += t.state == Thread::AtWarp;
            g_errors.add("deadlock in block " + std::to_string(block.x) + ": " + std::to_string(bar) +
                         " threads wait at __syncthreads, " + std::to_string(warp) + " at warp collectives, " +
                         std::to_string(threads - blk.live) +
                         " returned (a divergent barrier, or a warp collective that some lane never reaches)");
            ok = false;
            break;
        }
        Thread &t = blk.th[static_cast<size_t>(blk.ready.front())];
        blk.ready.pop_front();
        blk.cur = &t;
        threadIdx = Dim{static_cast<unsigned>(t.tid), 0, 0};
        switch_context(blk.sched, t.ctx);
    }
    g_block = nullptr;
    return ok;
}

// ---- Shared-memory checks of the PTX primitives -------------------------------------------------------

inline bool smem_range_ok(unsigned addr, int bytes, int align, const char *what) {
    if (addr % static_cast<unsigned>(align) != 0 || addr + static_cast<size_t>(bytes) > g_block->scratch_bytes) {
        g_errors.add(std::string(what) + ": shared address " + std::to_string(addr) + " (" + std::to_string(bytes) +
                     " bytes, alignment " + std::to_string(align) + ") outside the scratch of " +
                     std::to_string(g_block->scratch_bytes) + " bytes or misaligned");
        return false;
    }
    return true;
}

/** Race check of a shared access by the current thread of words [addr, addr + bytes) in epochs [from, now]. */
inline void track(unsigned addr, int bytes, bool write, int64_t from, const char *what) {
    const int t = my_tid();
    const int64_t now = g_block->epoch;
    for (unsigned w = addr / 4; w < (addr + static_cast<unsigned>(bytes) + 3) / 4; ++w) {
        WordState &s = g_block->words[w];
        bool race = false;
        if (s.wepoch >= from && s.wthread != t) race = true;           // write-write / write-read
        if (write && s.repoch >= from && s.rthread != t) race = true;  // read-write
        if (race) {
            g_errors.add(std::string(what) + ": race on shared word " + std::to_string(w) + " (byte " + std::to_string(4 * w) +
                         ") in barrier epoch " + std::to_string(now) + ": thread " + std::to_string(t) +
                         (write ? " writes" : " reads") + ", thread " +
                         std::to_string(s.wepoch >= from && s.wthread != t ? s.wthread : s.rthread) + " also accessed it");
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

inline double decode_bf16(unsigned bits) { return bits_as<float>((bits & 0xffffu) << 16); }
inline double decode_f16(unsigned bits) {
    const int s = (bits >> 15) & 1, e = (bits >> 10) & 31, m = bits & 1023;
    double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? std::nan("") : INFINITY) : std::ldexp(1024 + m, e - 25);
    return s ? -v : v;
}
/** Round to nearest even with `sig` significant bits and quantum at least 2^qmin; overflow past max -> inf. */
inline double round_small(double x, int sig, int qmin, double maxv) {
    if (x == 0 || !std::isfinite(x)) return x;
    int e;
    std::frexp(x, &e);
    const int q = std::max(e - sig, qmin);
    const double v = std::ldexp(std::nearbyint(std::ldexp(x, -q)), q);
    return std::fabs(v) > maxv ? std::copysign(INFINITY, x) : v;
}
/** OCP FP8 (the PTX ISA's .e4m3 / .e5m2): e4m3 bias 7, no infinities, S.1111.111 NaN; e5m2 bias 15,
 *  IEEE-style infinities and NaNs. */
inline double decode_e4m3(unsigned bits) {
    const int s = (bits >> 7) & 1, e = (bits >> 3) & 15, m = bits & 7;
    if (e == 15 && m == 7) return std::nan("");
    const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
    return s ? -v : v;
}
inline double decode_e5m2(unsigned bits) {
    const int s = (bits >> 7) & 1, e = (bits >> 2) & 31, m = bits & 3;
    const double v = e == 31 ? (m ? std::nan("") : INFINITY) : e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17);
    return s ? -v : v;
}
inline const double kBf16Max = 3.38953138925153547590470800371487866880e38, kF16Max = 65504.0;
inline unsigned encode_bf16(float x) {  // cvt.rn.bf16.f32
    if (std::isnan(x)) return 0x7fffu;
    return bits_as<unsigned>(static_cast<float>(round_small(x, 8, -133, kBf16Max))) >> 16;
}
inline unsigned encode_f16(float x) {  // cvt.rn.f16.f32
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

}  // namespace cuda_emu

#include "CudaEmuPtx.h"
