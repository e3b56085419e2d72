/** \file Bench.cpp
 * Timing of generated kernels against the machine's measured limits, and the schedule tuner.
 */
#include "driver/Bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

#include "interp/Inputs.h"
#include "interp/Npy.h"
#include "interp/Reference.h"
#include "driver/Run.h"
#include "runtime/CpuBackend.h"
#include "tile/StmtVisitor.h"
#include "runtime/Sha256.h"
#include "support/Error.h"

namespace rf {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int usable_threads(const CpuFeatures &f, int threads) {
    if (threads > 0) return threads;
    return static_cast<int>(std::max(1u, f.usable_cpus ? f.usable_cpus : f.logical_cpus));
}

// The probes: STREAM "add" (c = a + b, 3 arrays far beyond the caches), independent vector FMA
// chains (enough of them to cover the FMA latency), 12 independent chains of vdpbf16ps (64 FLOP
// each) / vpdpbusd (128 integer ops each), and AMX tile products (4 independent 16 x 16
// accumulators fed by 2 A and 2 B tiles: tdpbf16ps 16*16*32*2 FLOP, tdpbssd 16*16*64*2 ops each)
// where the ISA flags have them, all over every thread. The JIT compiles the probe with the host's
// -m flags, which name AMX only when the CPU and the OS (XCR0) have it; the probe still asks Linux
// for the tile data first (a tile instruction without that grant is SIGILL) and answers -1 without.
const char *kProbeSource = R"(
#include <cstdint>
#include <immintrin.h>
#include <omp.h>
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define RF_PROBE_AMX 1
// kind 3: tdpbf16ps, 4: tdpbssd; -1 when Linux refuses the tile data (ARCH_REQ_XCOMP_PERM, XTILEDATA).
static double rf_probe_amx(int64_t iters, int threads, int kind) {
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return -1;  // per process: every thread may use tiles
    double total = 0;
    #pragma omp parallel num_threads(threads) reduction(+:total)
    {
        struct alignas(64) { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg = {};
        cfg.palette = 1;
        for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
        alignas(64) uint8_t a[1024], b[1024];  // bf16 1.0 / 2^-10 pairs, or s8 3 / -2
        alignas(64) int32_t c[4][256];
        for (int i = 0; i < 1024; i += 2) {
            a[i] = kind == 3 ? 0x80 : 3; a[i + 1] = kind == 3 ? 0x3f : 3;
            b[i] = kind == 3 ? 0x80 : 0xfe; b[i + 1] = kind == 3 ? 0x3a : 0xfe;
        }
        // GCC's ldtilecfg/tileloadd asm declares no read of the config or tile memory: keep the stores.
        __asm__ volatile("" ::: "memory");
        _tile_loadconfig(&cfg);  // tile config is per thread
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        _tile_loadd(4, a, 64); _tile_loadd(5, a, 64); _tile_loadd(6, b, 64); _tile_loadd(7, b, 64);
        if (kind == 3)
            for (int64_t it = 0; it < iters; it++) {
                _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
            }
        else
            for (int64_t it = 0; it < iters; it++) {
                _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 4, 7); _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 5, 7);
            }
        _tile_stored(0, c[0], 64); _tile_stored(1, c[1], 64); _tile_stored(2, c[2], 64); _tile_stored(3, c[3], 64);
        _tile_release();
        for (int t = 0; t < 4; t++) {
            float f;
            __builtin_memcpy(&f, &c[t][0], 4);
            total += kind == 3 ? (double)f : (double)(c[t][0] & 0xff);  // non-negative: < 0 means "none"
        }
    }
    return total;
}
#endif
// kind 1: bf16 dot, 2: int8 dot, 3: AMX bf16 tiles, 4: AMX int8 tiles. Returns -1 when the CPU (the -m
// flags) has no such instruction, or (AMX) the OS does not grant it.
extern "C" double rf_probe_dot(int64_t iters, int threads, int kind) {
    if (kind == 3 || kind == 4) {
#if defined(RF_PROBE_AMX)
        return rf_probe_amx(iters, threads, kind);
#else
        return -1;
#endif
    }
    if (kind != 1 && kind != 2) return -1;
#if defined(__AVX512BF16__)
    const bool bf16 = true;
#else
    const bool bf16 = false;
#endif
#if defined(__AVX512VNNI__)
    const bool int8 = true;
#else
    const bool int8 = false;
#endif
    if ((kind == 1 && !bf16) || (kind == 2 && !int8)) return -1;
    double total = 0;
#if defined(__AVX512BF16__) || defined(__AVX512VNNI__)
    #pragma omp parallel num_threads(threads) reduction(+:total)
    {
        if (kind == 1) {
#if defined(__AVX512BF16__)
            float lanes[16];
            __m512 f[12];
            for (int r = 0; r < 12; r++) f[r] = _mm512_set1_ps(1e-3f * (float)(r + omp_get_thread_num()));
            const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3a803a80);
            for (int64_t it = 0; it < iters; it++)
                for (int r = 0; r < 12; r++) f[r] = _mm512_dpbf16_ps(f[r], a, b);
            for (int r = 0; r < 12; r++) {
                _mm512_storeu_ps(lanes, f[r]);
                total += lanes[0];
            }
#endif
        } else {
#if defined(__AVX512VNNI__)
            __m512i q[12];
            for (int r = 0; r < 12; r++) q[r] = _mm512_set1_epi32(r + omp_get_thread_num());
            const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
            for (int64_t it = 0; it < iters; it++)
                for (int r = 0; r < 12; r++) q[r] = _mm512_dpbusd_epi32(q[r], u, s);
            int32_t ints[16];
            for (int r = 0; r < 12; r++) {
                _mm512_storeu_si512(ints, q[r]);
                total += (double)(ints[0] & 0xff);  // non-negative: < 0 means "no such instruction"
            }
#endif
        }
    }
#else
    (void)iters; (void)threads;
#endif
    return total;
}
extern "C" void rf_probe_add(float *c, const float *a, const float *b, int64_t n, int threads) {
    #pragma omp parallel for simd num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++) c[i] = a[i] + b[i];
}
extern "C" double rf_probe_fma(int64_t iters, int threads) {
    double total = 0;
    #pragma omp parallel num_threads(threads) reduction(+:total)
    {
        float acc[16][16];
        for (int r = 0; r < 16; r++) for (int l = 0; l < 16; l++) acc[r][l] = 1.0f + 1e-3f * (r + l + omp_get_thread_num());
        const float m = 0.9999f, a = 1e-4f;
        for (int64_t it = 0; it < iters; it++) {
            #pragma GCC unroll 16
            for (int r = 0; r < 16; r++) {
                #pragma omp simd
                for (int l = 0; l < 16; l++) acc[r][l] = acc[r][l] * m + a;
            }
        }
        float s = 0;
        for (int r = 0; r < 16; r++) for (int l = 0; l < 16; l++) s += acc[r][l];
        total += s;
    }
    return total;
}
)";

}  // namespace

MachineLimits machine_limits(const CpuFeatures &cpu, int threads, bool remeasure) {
    threads = usable_threads(cpu, threads);
    std::filesystem::path dir = default_cache_dir();
    std::string key = sha256_hex(cpu.brand + "|" + std::to_string(threads)).substr(0, 16);
    std::filesystem::path cached = dir / ("machine-" + key + ".json");
    if (!remeasure) {
        std::ifstream in(cached);
        if (in) {
            try {
                nlohmann::json j = nlohmann::json::parse(in);
                MachineLimits m;
                m.bandwidth_gbs = j.at("bandwidth_gbs");
                m.fp32_gflops = j.at("fp32_gflops");
                m.bf16_gflops = j.at("bf16_gflops");  // an entry without them is measured again
                m.int8_gops = j.at("int8_gops");
                m.amx_bf16_gflops = j.at("amx_bf16_gflops");  // (entries from before the AMX probes too)
                m.amx_int8_gops = j.at("amx_int8_gops");
                m.threads = j.at("threads");
                m.source = "cached: " + cached.string();
                if (m.bandwidth_gbs > 0 && m.fp32_gflops > 0) return m;
            } catch (const std::exception &) {
                // A damaged entry is measured again.
            }
        }
    }
    pin_openmp_runtime();
    JitOptions jo;
    jo.flags = cpu_jit_flags(cpu);
    auto so = jit_compile(kProbeSource, jo);
    auto add = so->function<void (*)(float *, const float *, const float *, int64_t, int)>("rf_probe_add");
    auto fma = so->function<double (*)(int64_t, int)>("rf_probe_fma");
    MachineLimits m;
    m.threads = threads;
    {
        const int64_t n = int64_t(1) << 25;  // 128 MiB per array
        std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 2.0f), c(static_cast<size_t>(n), 0.0f);
        add(c.data(), a.data(), b.data(), n, threads);
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            auto t0 = Clock::now();
            add(c.data(), a.data(), b.data(), n, threads);
            best = std::min(best, seconds_since(t0));
        }
        m.bandwidth_gbs = 3.0 * 4.0 * static_cast<double>(n) / best / 1e9;
    }
    {
        const int64_t iters = 2000000;
        fma(1000, threads);
        double best = 1e30;
        for (int r = 0; r < 3; r++) {
            auto t0 = Clock::now();
            volatile double sink = fma(iters, threads);
            (void)sink;
            best = std::min(best, seconds_since(t0));
        }
        m.fp32_gflops = 2.0 * 256.0 * static_cast<double>(iters) * threads / best / 1e9;
    }
    auto dot = so->function<double (*)(int64_t, int, int)>("rf_probe_dot");
    for (int kind : {1, 2, 3, 4}) {
        // Similar times per repetition (~10 ms): a dot iteration is 12 instructions of ~1 cycle, an
        // AMX one 4 tile products of ~16 cycles each.
        const int64_t iters = kind <= 2 ? 2000000 : 500000;
        if (dot(1000, threads, kind) < 0) continue;  // no such instructions (AMX: or no permission)
        double best = 1e30;
        for (int r = 0; r < 3; r++) {
            auto t0 = Clock::now();
            volatile double sink = dot(iters, threads, kind);
            (void)sink;
            best = std::min(best, seconds_since(t0));
        }
        // Ops per iteration. Dots: 12 instructions of 16 lanes x 2 products x 2 FLOP (bf16) or 16
        // lanes x 4 products x 2 ops (int8). Tiles: 4 products of 16 x 16 outputs x K (32 bf16 pairs
        // or 64 s8) x 2.
        const double per_iter[] = {0, 64.0 * 12, 128.0 * 12, 4 * 16.0 * 16 * 32 * 2, 4 * 16.0 * 16 * 64 * 2};
        double rate = per_iter[kind] * static_cast<double>(iters) * threads / best / 1e9;
        (kind == 1 ? m.bf16_gflops : kind == 2 ? m.int8_gops : kind == 3 ? m.amx_bf16_gflops : m.amx_int8_gops) = rate;
    }
    m.source = "measured";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::ofstream out(cached);
    out << nlohmann::json{{"bandwidth_gbs", m.bandwidth_gbs}, {"fp32_gflops", m.fp32_gflops}, {"bf16_gflops", m.bf16_gflops},
                          {"int8_gops", m.int8_gops}, {"amx_bf16_gflops", m.amx_bf16_gflops}, {"amx_int8_gops", m.amx_int8_gops},
                          {"threads", threads}, {"cpu", cpu.brand}}.dump(2);
    return m;
}

FloorPeak floor_peak(const MachineLimits &m, GemmUnit unit) {
    FloorPeak f{m.fp32_gflops, "fp32"};
    auto consider = [&](double peak, const char *name) {
        if (peak > f.gflops) f = {peak, name};
    };
    if (unit == GemmUnit::Bf16) {
        consider(m.bf16_gflops, "bf16");
        consider(m.amx_bf16_gflops, "amx_bf16");
    } else if (unit == GemmUnit::Int8) {
        consider(m.int8_gops, "int8");
        consider(m.amx_int8_gops, "amx_int8");
    }
    return f;
}

GemmUnit gemm_unit(const tile::Module &m, bool bf16_tile_products) {
    std::map<std::string, tile::LocalClass> locals;
    for (const tile::Kernel &k : m.kernels)
        tile::for_each_stmt(k.body, [&](const tile::StmtP &s) {
            if (s->kind == tile::StmtKind::Decl) locals[s->name] = s->cls;
        });
    auto dtype = [&](Expr base) {
        if (!base->name.empty() && base->name[0] == '$') return locals[base->name] == tile::LocalClass::Int8 ? DType::i8 : m.compute;
        for (const tile::Buffer &b : m.buffers)
            if (b.name == base->name) return b.dtype;
        return m.compute;
    };
    GemmUnit unit = GemmUnit::Fp32;
    for (const tile::Kernel &k : m.kernels)
        tile::for_each_stmt(k.body, [&](const tile::StmtP &s) {
            if (s->kind != tile::StmtKind::Gemm) return;
            DType a = dtype(s->gemm->a_base), b = dtype(s->gemm->b_base);
            if (a == DType::i8 && b == DType::i8) unit = GemmUnit::Int8;
            else if (b == DType::bf16 && (a == DType::bf16 || (a == DType::f32 && bf16_tile_products)) && unit == GemmUnit::Fp32)
                unit = GemmUnit::Bf16;
        });
    return unit;
}

WorkloadCost workload_cost(const Program &p, const SizeBinding &sizes) {
    WorkloadCost c;
    for (const InputDecl &in : p.inputs) {
        double n = 1;
        for (int64_t d : input_shape(in, sizes)) n *= static_cast<double>(d);
        c.bytes += n * dtype_bytes(in.dtype);
    }
    for (const OutputDecl &out : p.outputs) {
        double n = 1;
        for (int64_t d : def_shape(*p.find_def(out.name), sizes)) n *= static_cast<double>(d);
        c.bytes += n * dtype_bytes(out.dtype);
    }
    // FLOPs of the spec with every value computed once: each distinct arithmetic node counts once
    // per point of the variables it depends on (exp(S - m) in attention counts per (i, j), not per
    // output column), and each reduction adds one operation per term. Index arithmetic is free.
    for (const TensorDef &d : p.defs) {
        std::map<std::string, double> extent;
        for (size_t i = 0; i < d.vars.size(); i++) extent[d.vars[i]->name] = static_cast<double>(eval_int(d.extents[i], sizes));
        visit(d.body, [&](Expr e) {
            if (e->kind == Kind::Reduce)
                for (size_t i = 0; i < e->num_axes(); i++) extent[e->axis(i)->name] = static_cast<double>(eval_int(e->extents[i], sizes));
        });
        auto domain = [&](Expr e) {
            std::set<std::string> vars;
            visit(e, [&](Expr n) {
                if (n->kind == Kind::Var && n->role == VarRole::Index) vars.insert(n->name);
            });
            double pts = 1;
            for (const std::string &v : vars) pts *= extent.count(v) ? extent[v] : 1.0;
            return pts;
        };
        visit(d.body, [&](Expr e) {
            if (e->stype == SType::Int || e->kind == Kind::Const || e->kind == Kind::Var || e->kind == Kind::Load) return;
            double ops = e->kind == Kind::Add || e->kind == Kind::Mul ? static_cast<double>(e->args.size() - 1) : 1;
            c.flops += ops * domain(e->kind == Kind::Reduce ? e->body() : e);
        });
    }
    return c;
}

namespace {

/** Bytes the generated program allocates beyond its inputs and outputs: float64 temporaries, every
 *  per-worker local array (times the workers), and the micro-kernels' packing scratch (at most
 *  640 KiB per worker, counted when a GEMM is used). */
double kernel_bytes(const tile::Module &m, const SizeBinding &sizes, int threads) {
    double bytes = 0;
    for (const tile::Buffer &b : m.buffers) {
        if (b.role != tile::Buffer::Role::Temp) continue;
        double n = 1;
        for (Expr d : b.dims) n *= static_cast<double>(eval_int(d, sizes));
        bytes += 8 * n;
    }
    bool gemm = false;
    auto count = [&](const tile::StmtP &s) {
        if (s->kind == tile::StmtKind::Gemm) gemm = true;
        if (s->kind == tile::StmtKind::Decl && !s->dims.empty()) {
            double n = 1;
            for (Expr d : s->dims) n *= static_cast<double>(eval_int(d, sizes));
            // Bytes per element: float64 states and int64 indices 8, int8 tiles 1, the compute type (tiles,
            // lane states) 4.
            int width = s->cls == tile::LocalClass::State || s->cls == tile::LocalClass::Index ? 8 : s->cls == tile::LocalClass::Int8 ? 1 : 4;
            bytes += n * width * threads;
        }
    };
    for (const tile::Kernel &k : m.kernels) tile::for_each_stmt(k.body, count);
    if (gemm) bytes += 640.0 * 1024 * threads;
    return bytes;
}

struct Timing {
    double median_ms = 0, min_ms = 0;
    int reps = 0;
};

/** Median and best of repeated calls of the kernel on the same buffers (the calls a user makes). */
Timing time_kernel(const Kernel &k, CpuBuffers &bufs, double budget_s, int min_reps) {
    auto [ins, outs] = buffer_views(bufs, k.compilation().program);
    k(ins, outs);  // warm-up: page faults, thread pool start
    std::vector<double> ms;
    auto start = Clock::now();
    while (static_cast<int>(ms.size()) < min_reps || seconds_since(start) < budget_s) {
        auto t0 = Clock::now();
        k(ins, outs);
        ms.push_back(seconds_since(t0) * 1e3);
        if (ms.size() > 10000) break;
    }
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms.front(), static_cast<int>(ms.size())};
}

std::string tune_key(const Compilation &c, const SizeBinding &sizes, int threads) {
    std::ostringstream k;
    k << c.source << "|threads=" << threads << "|cpu=" << c.target.cpu.brand;
    for (auto &[n, v] : sizes) k << "|" << n << "=" << v;
    return sha256_hex(k.str()).substr(0, 24);
}

std::filesystem::path tune_path(const std::string &key) {
    return std::filesystem::path(default_cache_dir()) / "tune" / (key + ".json");
}

struct Variant {
    std::optional<Strategy> strategy;  ///< none: the plan's
    int64_t tile = 0, segments = 0, row_block = 0;
    bool unfused = false;
    /** The name the tune cache stores: "" (the plan's), a strategy, or unfused. */
    std::string name() const { return unfused ? "unfused" : strategy ? to_string(*strategy) : ""; }
    static Variant named(const std::string &n, int64_t tile, int64_t segments, int64_t row_block) {
        Variant v{std::nullopt, tile, segments, row_block, n == "unfused"};
        if (!v.unfused && !n.empty()) v.strategy = parse_strategy(n);
        return v;
    }
    std::string label() const {
        std::ostringstream s;
        s << (name().empty() ? "plan" : name()) << " tile=" << (tile ? std::to_string(tile) : "auto")
          << " segments=" << (segments ? std::to_string(segments) : "auto")
          << " row_block=" << (row_block ? std::to_string(row_block) : "auto");
        return s.str();
    }
};

/** The compilation's options with a variant's schedule knobs. */
Options variant_options(const Compilation &c, const BenchOptions &o, const Variant &v) {
    Options co = c.options;
    co.threads = o.threads;
    co.strategy = v.strategy;
    co.unfused = v.unfused;
    co.tile = v.tile;
    co.segments = v.segments;
    co.row_block = v.row_block;
    return co;
}

/** The Kernel of one variant of the compilation's schedule. */
Kernel build_variant(const std::shared_ptr<const Compilation> &c, const BenchOptions &o, const Variant &v) {
    return compile_kernel(c, variant_options(*c, o, v));
}

/** The compilation must be for this target, with its plan made for the sizes it is run at. */
void require_compiled_for(const Compilation &c, TargetKind kind, const BenchOptions &o) {
    if (c.target.kind != kind || (!o.sizes.empty() && c.sizes != bind_sizes(c.program, o.sizes)))
        throw InternalError("bench/tune: the compilation was not made for the bench's target and sizes");
}

}  // namespace

BenchReport bench_compiled(const std::shared_ptr<const Compilation> &shared, const BenchOptions &o) {
    const Compilation &c = *shared;
    if (is_gpu(c.target.kind)) return bench_gpu(c, o);
    require_compiled_for(c, TargetKind::Cpu, o);
    const Program &p = c.program;
    SizeBinding sizes = bind_sizes(p, o.sizes);
    int threads = usable_threads(c.target.cpu, o.threads);
    std::map<std::string, Tensor> inputs = o.load_dir.empty() ? make_random_inputs(p, sizes, o.seed) : load_dir(o.load_dir, p, sizes);
    CpuBuffers bufs(p, sizes, inputs);
    MachineLimits lim = machine_limits(c.target.cpu, o.threads);
    WorkloadCost cost = workload_cost(p, sizes);

    Variant fused{o.strategy, o.tile, o.segments, o.row_block, o.unfused};
    std::string tuned_from;
    if (o.use_tuned && !o.strategy && !o.unfused && !o.tile && !o.segments && !o.row_block) {
        std::ifstream in(tune_path(tune_key(c, sizes, threads)));
        if (in) {
            try {
                nlohmann::json t = nlohmann::json::parse(in);
                fused = Variant::named(t.at("best").at("strategy"), t.at("best").at("tile"), t.at("best").at("segments"),
                                       t.at("best").value("row_block", int64_t(0)));
                tuned_from = tune_path(tune_key(c, sizes, threads)).string();
            } catch (const std::exception &) {
                fused = {o.strategy, o.tile, o.segments, o.row_block, o.unfused};
            }
        }
    }
    Kernel prog = build_variant(shared, o, fused);
    Timing tf = time_kernel(prog, bufs, o.budget_s, o.min_reps);
    nlohmann::json j;
    j["spec"] = c.file;
    j["sizes"] = sizes;
    j["threads"] = threads;
    j["time_ms"] = tf.median_ms;
    j["min_ms"] = tf.min_ms;
    j["reps"] = tf.reps;
    j["variant"] = fused.label();
    std::string strategy;
    for (const tile::Kernel &k : prog.module().kernels) strategy += (strategy.empty() ? "" : "+") + std::string(to_string(k.schedule.strategy));
    j["strategy"] = strategy;
    j["kernels"] = prog.module().kernels.size();
    if (!tuned_from.empty()) j["tuned"] = tuned_from;
    j["bytes"] = cost.bytes;
    j["flops"] = cost.flops;
    j["gbps"] = cost.bytes / (tf.median_ms * 1e-3) / 1e9;
    j["gflops"] = cost.flops / (tf.median_ms * 1e-3) / 1e9;
    j["machine"] = {{"bandwidth_gbs", lim.bandwidth_gbs}, {"fp32_gflops", lim.fp32_gflops}, {"bf16_gflops", lim.bf16_gflops},
                    {"int8_gops", lim.int8_gops},         {"amx_bf16_gflops", lim.amx_bf16_gflops},
                    {"amx_int8_gops", lim.amx_int8_gops}, {"source", lim.source}};
    // The compute floor at the peak of the fastest unit the machine has for the dtype the kernel's
    // GEMMs multiply in (AMX tiles or AVX-512 dot products), never below the f32 FMA peak.
    GemmUnit unit = gemm_unit(prog.module(), cpu_rounds_tile_products(prog.module(), cpu_codegen_options(c.options)));
    FloorPeak fp = floor_peak(lim, unit);
    const double peak = fp.gflops;
    const std::string &peak_unit = fp.unit;
    j["peak_unit"] = peak_unit;
    j["peak_gflops"] = peak;
    double floor_ms = std::max(cost.bytes / (lim.bandwidth_gbs * 1e9), cost.flops / (peak * 1e9)) * 1e3;
    j["floor_ms"] = floor_ms;
    j["fraction_of_floor"] = floor_ms / tf.median_ms;
    j["fraction_of_bandwidth"] = j["gbps"].get<double>() / lim.bandwidth_gbs;
    j["fraction_of_fp32_peak"] = j["gflops"].get<double>() / lim.fp32_gflops;
    j["fraction_of_peak"] = j["gflops"].get<double>() / peak;
    j["compile_ms"] = prog.compile_ms();
    j["peak_bytes"] = kernel_bytes(prog.module(), sizes, threads);  // allocated by the program beyond inputs/outputs
    std::ostringstream text;
    text.setf(std::ios::fixed);
    text.precision(3);
    text << c.file << " at";
    for (auto &[n, v] : sizes) text << " " << n << "=" << v;
    text << " (" << threads << " threads; machine: " << lim.bandwidth_gbs << " GB/s, " << lim.fp32_gflops << " GFLOP/s fp32, "
         << lim.bf16_gflops << " bf16, " << lim.int8_gops << " GOP/s int8";
    if (lim.amx_bf16_gflops > 0 || lim.amx_int8_gops > 0)
        text << ", AMX " << lim.amx_bf16_gflops << " GFLOP/s bf16, " << lim.amx_int8_gops << " GOP/s int8";
    text << ", " << lim.source << ")\n";
    text << "  floor " << floor_ms << " ms (" << cost.bytes / 1e6 << " MB, " << cost.flops / 1e9 << " GFLOP at the " << peak_unit
         << " peak)\n";
    text << "  memory beyond inputs and outputs: " << j["peak_bytes"].get<double>() / (1 << 20) << " MiB\n";
    text << "  fused   " << tf.median_ms << " ms  " << j["gbps"].get<double>() << " GB/s  " << j["gflops"].get<double>()
         << " GFLOP/s  " << 100 * floor_ms / tf.median_ms << "% of floor  [" << fused.label() << "; " << strategy << "]\n";
    if (o.unfused_too) {
        Kernel un = build_variant(shared, o, {std::nullopt, 0, 0, 0, true});
        Timing tu = time_kernel(un, bufs, o.budget_s, o.min_reps);
        j["unfused_time_ms"] = tu.median_ms;
        j["unfused"] = {{"time_ms", tu.median_ms}, {"reps", tu.reps}, {"kernels", un.module().kernels.size()}};
        j["speedup_vs_unfused"] = tu.median_ms / tf.median_ms;
        text << "  unfused " << tu.median_ms << " ms  (" << un.module().kernels.size() << " kernels)  fused is "
             << tu.median_ms / tf.median_ms << "x faster\n";
    }
    return {j, text.str()};
}

std::optional<BenchReport> cached_tuning(const std::filesystem::path &path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    try {
        nlohmann::json j = nlohmann::json::parse(in);
        j["cached"] = path.string();
        return BenchReport{j, "cached tuning result: " + path.string() + "\n  best: " + j.at("best").at("label").get<std::string>() + "\n"};
    } catch (const std::exception &) {
        return std::nullopt;  // unreadable: tune again
    }
}

void save_tuning(const std::filesystem::path &path, nlohmann::json &j) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    std::string tmp = path.string() + ".tmp" + std::to_string(::getpid());
    std::ofstream(tmp) << j.dump(2);
    std::filesystem::rename(tmp, path, ec);  // atomic: a concurrent reader sees the old or the new file
    j["saved"] = path.string();
}

BenchReport tune_compiled(const std::shared_ptr<const Compilation> &shared, const TuneOptions &o) {
    const Compilation &c = *shared;
    if (is_gpu(c.target.kind)) return tune_gpu(c, o);
    require_compiled_for(c, TargetKind::Cpu, o.bench);
    const Program &p = c.program;
    SizeBinding sizes = bind_sizes(p, o.bench.sizes);
    int threads = usable_threads(c.target.cpu, o.bench.threads);
    std::string key = tune_key(c, sizes, threads);
    std::filesystem::path path = tune_path(key);
    if (!o.retune)
        if (std::optional<BenchReport> r = cached_tuning(path)) return *r;
    CpuBuffers bufs(p, sizes, make_random_inputs(p, sizes, o.bench.seed));
    std::vector<Variant> variants;
    for (std::optional<Strategy> s : {std::optional<Strategy>{}, std::optional{Strategy::MultiPass}, std::optional{Strategy::OnchipMultipass}})
        for (int64_t tile : {64, 256, 1024}) variants.push_back({s, tile, 1, 0});
    for (int64_t rb : {4, 16, 32, 64})
        for (int64_t tile : {64, 128}) variants.push_back({std::nullopt, tile, 1, rb});
    for (int64_t seg : {2 * threads, 8 * threads}) variants.push_back({Strategy::MultiSegment, 256, seg, 0});
    variants.push_back({std::nullopt, 0, 0, 0, true});
    nlohmann::json tried = nlohmann::json::array();
    double best = 1e300;
    Variant best_v;
    for (const Variant &v : variants) {
        Kernel prog = build_variant(shared, o.bench, v);
        Timing t = time_kernel(prog, bufs, std::min(o.bench.budget_s, 0.3), 3);
        tried.push_back({{"label", v.label()}, {"time_ms", t.median_ms}});
        if (o.progress) {
            std::ostringstream line;
            line << "  " << v.label() << ": " << t.median_ms << " ms" << (t.median_ms < best ? "  (best so far)" : "");
            o.progress(line.str());
        }
        if (t.median_ms < best && !v.unfused) {
            best = t.median_ms;
            best_v = v;
        }
    }
    nlohmann::json j;
    j["spec"] = c.file;
    j["sizes"] = sizes;
    j["threads"] = threads;
    j["tried"] = tried;
    j["best"] = {{"strategy", best_v.name()}, {"tile", best_v.tile}, {"segments", best_v.segments},
                 {"row_block", best_v.row_block}, {"label", best_v.label()},
                 {"time_ms", best}};
    save_tuning(path, j);
    return {j, "best: " + best_v.label() + " (" + std::to_string(best) + " ms), saved to " + path.string() + "\n"};
}

}  // namespace rf
