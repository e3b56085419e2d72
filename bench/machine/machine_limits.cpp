// machine_limits: measures the limits that the benchmark reports every result against (docs/design.md §8):
// sustained memory bandwidth and peak arithmetic rates, with all cores and with one core.
// Prints one JSON object on stdout; progress goes to stderr.
//
// Build (scripts/bench.sh does this):
//   g++ -std=c++17 -O3 -march=native -fopenmp bench/machine/machine_limits.cpp -o machine_limits
// Usage: machine_limits [--quick] [--mb N] [--reps N] [--threads N]
//
// Method
// ------
// Memory bandwidth (STREAM-like). Three float32 arrays a, b, c of `array_bytes` each, at least 4x the
// last-level cache (so nothing is served from cache) and at least 256 MiB. The arrays are initialized
// in parallel with the same static OpenMP schedule as the kernels (first touch puts every page next to
// the thread that streams it). Kernels, as in STREAM:
//   copy  c = a            counted bytes 2 * 4 per element
//   scale b = s * c        2 * 4
//   add   c = a + b        3 * 4
//   triad a = b + s * c    3 * 4
//   read  sum += a         1 * 4  (not in STREAM; a pure read stream, what a reduction does)
//   copy_nt c = a          2 * 4  (not in STREAM; copy with non-temporal stores: no write-allocate
//                                  read, the way redfuse's row kernels write outputs larger than the
//                                  caches, so the counted bytes are the bytes that move)
// Bytes are counted the STREAM way: the write-allocate read of a destination line is NOT counted, so
// the kernels that store understate the traffic that really moves (by up to 1/2 for copy/scale, 1/3
// for add/triad) unless the compiler emits non-temporal stores. Each kernel runs `reps` times; the
// best (shortest) time is kept, as STREAM does. "all_cores" uses every OpenMP thread, "one_core" one.
// limits.mem_GBps is the largest of the all-core figures: the most the machine was seen to sustain,
// so a fraction against it is conservative. limits.mem_read_GBps is the all-core pure read: a kernel
// that only reads cannot use the write half of a copy's traffic (bench/model.py's memory floor).
//
// Peak FP32 FMA rate. Every thread runs a register-blocked loop of independent FMA chains
// (acc[i] = acc[i] * x + y) with the widest vector ISA present: AVX-512 (16 lanes, 12 chains) when
// the CPU has AVX512F, AVX2+FMA (8 lanes, 12 chains) otherwise; enough chains to cover the FMA latency
// times the number of FMA pipes on current x86 cores (latency 4, 2 pipes -> >= 8). x and y come from
// volatile memory so the compiler cannot fold the chains. FLOPs = 2 per lane per FMA. The threads
// start together after a barrier; the time is the wall time of the whole team; best of `reps`.
// The AVX2 rate is also reported when AVX-512 is present (on some cores AVX-512 runs at half rate or
// lowers the clock, and a kernel may reach only the AVX2 figure).
//
// bf16 dot rate (AVX512_BF16, vdpbf16ps): each instruction does 16 lanes x 2 products + 2 adds
// = 64 FLOP. int8 dot rate (AVX512_VNNI, vpdpbusd): 16 lanes x 4 u8*s8 products + 4 adds = 128 OP.
// Both use the same register blocking; they are skipped (null) when the CPU lacks the extension.
// int8 rate without VNNI (AVX2, measured only when AVX512_VNNI is absent): vpmaddubsw (u8 x s8 pairs into
// saturating int16), vpmaddwd by ones (pairs into int32) and vpaddd, the sequence of PyTorch's AVX2 int8
// GEMMs: 8 lanes x 4 products + 4 adds = 64 OP per three instructions. (redfuse's exact AVX2 form,
// vpmaddwd on widened int16 and vpaddd, does 32 OP per two; the floor is the faster sequence.)
// Each function is compiled with a target attribute, so the file builds on any x86-64 compiler and
// the ISA is chosen at run time (cpuid via __builtin_cpu_supports).
//
// AMX tile rates (Sapphire Rapids and later): tile palette 1, four 16 x 64-byte accumulator tiles
// (tmm0-3) fed by two A tiles (tmm4-5) and two B tiles (tmm6-7) in a 2 x 2 block, the A/B tiles
// loaded once, so the loop is four independent tile products per iteration and nothing else.
// tdpbf16ps multiplies 16 x 32 bf16 by 32 x 16 bf16 into 16 x 16 f32: 16*16*32*2 = 16384 FLOP;
// tdpbssd 16 x 64 s8 by 64 x 16 s8 into s32: 16*16*64*2 = 32768 OP. They run only when CPUID has
// the unit, XCR0 has the tile state enabled, and Linux grants this process the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before the first tile instruction; otherwise
// they are null, and "amx_permission" says why. Each thread loads its own tile config (per-thread
// state) and releases it at the end.
// AVX512_FP16 FMA rate: the FP32 loop on __m512h (32 lanes, 64 FLOP per vfmadd), null without it.
//
// limits.bf16_GFLOPs / int8_GOPs are the FASTEST unit the CPU has for the dtype: the larger of the
// dot-product (AVX512_BF16 / AVX512_VNNI) and the AMX tile figure, with bf16_unit / int8_unit naming
// it ("amx", "avx512_bf16", "avx512_vnni"); the per-unit figures are kept next to them. A floor taken
// from the dot products on a machine with AMX would be a floor that PyTorch's oneDNN tiles pass.
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Options {
  bool quick = false;
  long mb = 0;  // per-array MiB; 0 = auto
  int reps = 0;
  int threads = 0;
};

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (f) std::getline(f, s);
  return s;
}

// Size strings in sysfs look like "32768K".
long parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (end && (*end == 'K' || *end == 'k')) v *= 1024;
  else if (end && (*end == 'M' || *end == 'm')) v *= 1024 * 1024;
  return v;
}

// Last-level cache as the kernel exposes it to this machine (sysfs), else sysconf.
long cache_size(int level, long* sysconf_value) {
  long best = 0;
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string lvl = read_first_line(dir + "level");
    if (lvl.empty()) break;
    std::string type = read_first_line(dir + "type");
    if (std::atoi(lvl.c_str()) == level && type != "Instruction") best = parse_size(read_first_line(dir + "size"));
  }
  long sc = 0;
#ifdef _SC_LEVEL1_DCACHE_SIZE
  if (level == 1) sc = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  if (level == 2) sc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (level == 3) sc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  if (sysconf_value) *sysconf_value = sc > 0 ? sc : 0;
  return best > 0 ? best : (sc > 0 ? sc : 0);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown";
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}

// ---------------------------------------------------------------- memory bandwidth
struct Bandwidth {
  double copy = 0, scale = 0, add = 0, triad = 0, read = 0, copy_nt = 0;  // GB/s (1e9 bytes)
};

// c = a with non-temporal stores (n is a multiple of 64; both arrays 64-byte aligned).
void copy_nontemporal(const float* a, float* c, long n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long i = 0; i < n; i += 64) {
#if defined(__AVX512F__)
    for (int j = 0; j < 64; j += 16) _mm512_stream_ps(c + i + j, _mm512_load_ps(a + i + j));
#elif defined(__AVX__)
    for (int j = 0; j < 64; j += 8) _mm256_stream_ps(c + i + j, _mm256_load_ps(a + i + j));
#else
    for (int j = 0; j < 64; j += 4) _mm_stream_ps(c + i + j, _mm_load_ps(a + i + j));
#endif
  }
  _mm_sfence();
}

volatile float g_sink = 0;

Bandwidth stream(float* a, float* b, float* c, long n, int threads, int reps) {
  const float s = 3.0f;
  double tbest[6];
  for (double& t : tbest) t = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < n; ++i) c[i] = a[i];
    double t1 = now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < n; ++i) b[i] = s * c[i];
    double t2 = now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < n; ++i) c[i] = a[i] + b[i];
    double t3 = now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    double t4 = now();
    // The read kernel keeps 64 partial sums per thread (4 AVX-512 or 8 AVX2 registers) so that it is
    // limited by memory, not by the latency of one chain of float adds (n is a multiple of 64).
    float sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    {
      float part[64] = {0};
#pragma omp for schedule(static)
      for (long i = 0; i < n; i += 64) {
#pragma omp simd
        for (int j = 0; j < 64; ++j) part[j] += a[i + j];
      }
      for (int j = 0; j < 64; ++j) sum += part[j];
    }
    double t5 = now();
    g_sink = sum;
    copy_nontemporal(a, c, n, threads);
    double t6 = now();
    double ts[6] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5};
    for (int k = 0; k < 6; ++k) tbest[k] = std::min(tbest[k], ts[k]);
  }
  const double e = 4.0 * static_cast<double>(n);
  Bandwidth bw;
  bw.copy = 2 * e / tbest[0] / 1e9;
  bw.scale = 2 * e / tbest[1] / 1e9;
  bw.add = 3 * e / tbest[2] / 1e9;
  bw.triad = 3 * e / tbest[3] / 1e9;
  bw.read = 1 * e / tbest[4] / 1e9;
  bw.copy_nt = 2 * e / tbest[5] / 1e9;
  return bw;
}

// ---------------------------------------------------------------- compute peaks
// Each kernel returns the operations one thread performed; they run `iters` iterations of NACC
// independent chains. The result is written to a sink so the loop cannot be removed.
volatile float g_x = 0.999999f, g_y = 1e-7f;
volatile int g_isink = 0;
constexpr int NACC = 12;

__attribute__((target("avx512f"))) double fma_avx512(long iters) {
  __m512 x = _mm512_set1_ps(g_x), y = _mm512_set1_ps(g_y);
  __m512 acc[NACC];
  for (int i = 0; i < NACC; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < NACC; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  __m512 s = acc[0];
  for (int i = 1; i < NACC; ++i) s = _mm512_add_ps(s, acc[i]);
  float t[16];
  _mm512_storeu_ps(t, s);
  g_sink = t[0] + t[15];
  return static_cast<double>(iters) * NACC * 16 * 2;
}

__attribute__((target("avx2,fma"))) double fma_avx2(long iters) {
  __m256 x = _mm256_set1_ps(g_x), y = _mm256_set1_ps(g_y);
  __m256 acc[NACC];
  for (int i = 0; i < NACC; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < NACC; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  __m256 s = acc[0];
  for (int i = 1; i < NACC; ++i) s = _mm256_add_ps(s, acc[i]);
  float t[8];
  _mm256_storeu_ps(t, s);
  g_sink = t[0] + t[7];
  return static_cast<double>(iters) * NACC * 8 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) double dot_bf16(long iters) {
  // The bf16 operands: 32 pairs of bf16 per register, built from float so that no constant folds.
  __m512 xf = _mm512_set1_ps(g_x), yf = _mm512_set1_ps(g_y);
  __m512bh a = _mm512_cvtne2ps_pbh(xf, xf), b = _mm512_cvtne2ps_pbh(yf, yf);
  __m512 acc[NACC];
  for (int i = 0; i < NACC; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < NACC; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < NACC; ++i) s = _mm512_add_ps(s, acc[i]);
  float t[16];
  _mm512_storeu_ps(t, s);
  g_sink = t[0] + t[15];
  return static_cast<double>(iters) * NACC * 64;
}

__attribute__((target("avx512f,avx512vnni"))) double dot_int8(long iters) {
  __m512i a = _mm512_set1_epi8(static_cast<char>(g_isink + 3));
  __m512i b = _mm512_set1_epi8(static_cast<char>(g_isink - 2));
  __m512i acc[NACC];
  for (int i = 0; i < NACC; ++i) acc[i] = _mm512_set1_epi32(i);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < NACC; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < NACC; ++i) s = _mm512_add_epi32(s, acc[i]);
  int t[16];
  _mm512_storeu_si512(t, s);
  g_isink = t[0] + t[15];
  return static_cast<double>(iters) * NACC * 128;
}

__attribute__((target("avx2"))) double dot_int8_avx2(long iters) {
  const __m256i a = _mm256_set1_epi8(static_cast<char>(g_isink + 3));
  const __m256i b = _mm256_set1_epi8(static_cast<char>(g_isink - 2));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[NACC];
  for (int i = 0; i < NACC; ++i) acc[i] = _mm256_set1_epi32(i);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < NACC; ++i) acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
  }
  __m256i s = acc[0];
  for (int i = 1; i < NACC; ++i) s = _mm256_add_epi32(s, acc[i]);
  int t[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(t), s);
  g_isink = t[0] + t[7];
  return static_cast<double>(iters) * NACC * 64;
}

// ---------------------------------------------------------------- AMX and AVX512_FP16
// What __builtin_cpu_supports cannot say on every compiler: the AMX units, AVX512_FP16, and whether
// the OS saves their state (XCR0). CPUID leaf 7.0 EDX: 22 AMX-BF16, 23 AVX512_FP16, 24 AMX-TILE,
// 25 AMX-INT8; XCR0 bits 17/18 tile config/data, 5-7 opmask/ZMM.
struct ExtraIsa {
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false, avx512_fp16 = false;
  bool os_amx = false, os_avx512 = false;
};

ExtraIsa detect_extra_isa() {
  ExtraIsa e;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return e;
  e.amx_bf16 = (d >> 22) & 1;
  e.avx512_fp16 = (d >> 23) & 1;
  e.amx_tile = (d >> 24) & 1;
  e.amx_int8 = (d >> 25) & 1;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (!__get_cpuid(1, &a1, &b1, &c1, &d1) || !((c1 >> 27) & 1)) return e;  // no OSXSAVE: no XCR0 to read
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));  // inline: _xgetbv needs -mxsave
  const unsigned long long xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  e.os_avx512 = (xcr0 & 0xe6) == 0xe6;
  e.os_amx = ((xcr0 >> 17) & 3) == 3;
  return e;
}

// Linux hands out the 8 KiB of tile data per process on request; without the grant the first tile
// instruction raises SIGILL. Returns "granted" or why not.
std::string request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kGetPerm = 0x1022, kReqPerm = 0x1023, kXtileData = 18;  // <asm/prctl.h>, XSAVE numbering
  if (syscall(SYS_arch_prctl, kReqPerm, kXtileData) != 0) return std::string("denied: ") + std::strerror(errno);
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kGetPerm, &mask) != 0 || !((mask >> kXtileData) & 1)) return "denied: not in the granted mask";
  return "granted";
#else
  return "denied: not Linux";
#endif
}

// The 64-byte LDTILECFG operand (palette 1): bytes per row and rows of each of the 8 tiles.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Loads the config (per thread), zeroes the accumulators C (tmm0-3) and loads A (tmm4-5) from `a`,
// B (tmm6-7) from `b`; every tile is 16 rows x 64 bytes.
__attribute__((target("amx-tile"))) void tiles_load(const void* a, const void* b) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC's ldtilecfg / tileloadd asm declares no read of the 64-byte config or of the tiles' memory,
  // so without this barrier the stores that fill them could be dropped as dead.
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
}

// Stores the accumulators (so the products are observable) and releases the tile state.
__attribute__((target("amx-tile"))) void tiles_store(void* c0, void* c1, void* c2, void* c3) {
  _tile_stored(0, c0, 64);
  _tile_stored(1, c1, 64);
  _tile_stored(2, c2, 64);
  _tile_stored(3, c3, 64);
  _tile_release();
}

__attribute__((target("amx-tile,amx-bf16"))) double amx_bf16(long iters) {
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float c[4][16 * 16];
  float xf = g_x, yf = g_y;
  uint32_t xb, yb;
  std::memcpy(&xb, &xf, 4);
  std::memcpy(&yb, &yf, 4);
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = static_cast<uint16_t>(xb >> 16);  // bf16 = the top half of the float
    b[i] = static_cast<uint16_t>(yb >> 16);
  }
  tiles_load(a, b);
  for (long it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  tiles_store(c[0], c[1], c[2], c[3]);
  g_sink = c[0][0] + c[1][17] + c[2][34] + c[3][255];
  return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2;
}

__attribute__((target("amx-tile,amx-int8"))) double amx_int8(long iters) {
  alignas(64) int8_t a[16 * 64], b[16 * 64];
  alignas(64) int32_t c[4][16 * 16];
  std::memset(a, static_cast<int8_t>(g_isink + 3), sizeof a);
  std::memset(b, static_cast<int8_t>(g_isink - 2), sizeof b);
  tiles_load(a, b);
  for (long it = 0; it < iters; ++it) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  tiles_store(c[0], c[1], c[2], c[3]);
  g_isink = c[0][0] + c[1][17] + c[2][34] + c[3][255];
  return static_cast<double>(iters) * 4 * 16 * 16 * 64 * 2;
}

// _Float16 vectors need GCC 12 / clang 14; an older compiler builds the file without this unit.
#if (defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && __GNUC__ >= 12)
#define ML_HAVE_FP16 1
// Operands that keep the fp16 chains normal: acc -> y / (1 - x) = 0.5 (no subnormal slow path).
volatile float g_hx = 0.5f, g_hy = 0.25f;

__attribute__((target("avx512f,avx512fp16"))) double fma_fp16(long iters) {
  __m512h x = _mm512_set1_ph(static_cast<_Float16>(g_hx)), y = _mm512_set1_ph(static_cast<_Float16>(g_hy));
  __m512h acc[NACC];
  for (int i = 0; i < NACC; ++i) acc[i] = _mm512_set1_ph(static_cast<_Float16>(0.01f * static_cast<float>(i)));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < NACC; ++i) acc[i] = _mm512_fmadd_ph(acc[i], x, y);
  }
  __m512h s = acc[0];
  for (int i = 1; i < NACC; ++i) s = _mm512_add_ph(s, acc[i]);
  _Float16 t[32];
  _mm512_storeu_ph(t, s);
  g_sink = static_cast<float>(t[0]) + static_cast<float>(t[31]);
  return static_cast<double>(iters) * NACC * 32 * 2;
}
#else
#define ML_HAVE_FP16 0
double fma_fp16(long) { return 0; }
#endif

using Kernel = double (*)(long);

// Runs `k` on `threads` threads for about `seconds`; best of `reps`; returns G-ops per second.
double peak(Kernel k, int threads, int reps, double seconds) {
  // Calibrate the iteration count on one thread.
  long iters = 1 << 16;
  for (;;) {
    double t0 = now();
    k(iters);
    double t = now() - t0;
    if (t > seconds / 4 || iters > (1L << 40)) {
      iters = static_cast<long>(static_cast<double>(iters) * seconds / std::max(t, 1e-6));
      break;
    }
    iters *= 4;
  }
  iters = std::max(iters, 1L << 16);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    double ops = 0, t0 = 0, t1 = 0;
#pragma omp parallel num_threads(threads) reduction(+ : ops)
    {
#pragma omp barrier
#pragma omp master
      t0 = now();
      ops += k(iters);
#pragma omp barrier
#pragma omp master
      t1 = now();
    }
    best = std::max(best, ops / (t1 - t0) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") opt.quick = true;
    else if (a == "--mb" && i + 1 < argc) opt.mb = std::atol(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) opt.reps = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) opt.threads = std::atoi(argv[++i]);
    else if (a == "--help" || a == "-h") {
      std::printf("usage: machine_limits [--quick] [--mb N] [--reps N] [--threads N]\n");
      return 0;
    } else {
      std::fprintf(stderr, "machine_limits: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  __builtin_cpu_init();
  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool has_avx512 = __builtin_cpu_supports("avx512f");
  const bool has_bf16 = has_avx512 && __builtin_cpu_supports("avx512bf16");
  const bool has_vnni = has_avx512 && __builtin_cpu_supports("avx512vnni");
  // The kernel lists a flag in /proc/cpuinfo only when it supports the feature; CPUID is the
  // fallback for older kernels. Either way a unit runs only with its OS state and permission below.
  std::string cpu_flags;
  {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("flags", 0) == 0) {
        cpu_flags = line + " ";
        break;
      }
  }
  auto flag = [&](const char* name) { return cpu_flags.find(" " + std::string(name) + " ") != std::string::npos; };
  const ExtraIsa xisa = detect_extra_isa();
  const bool has_amx = flag("amx_tile") || xisa.amx_tile;
  const bool has_amx_bf16 = flag("amx_bf16") || xisa.amx_bf16;
  const bool has_amx_int8 = flag("amx_int8") || xisa.amx_int8;
  const bool cpu_fp16 = has_avx512 && xisa.os_avx512 && (flag("avx512_fp16") || xisa.avx512_fp16);
  const bool has_fp16 = ML_HAVE_FP16 && cpu_fp16;  // measured only when this compiler built the probe
  // Ask for the tile data before any thread exists (the grant is per process, so the OpenMP threads
  // created later have it too); never on a CPU without the unit or its XCR0 state.
  std::string amx_permission = "no AMX on this CPU";
  if (has_amx && !xisa.os_amx) amx_permission = "tile state not enabled by the OS (XCR0)";
  else if (has_amx && xisa.amx_tile) amx_permission = request_amx_permission();
  const bool amx_ok = amx_permission == "granted";
  const bool run_amx_bf16 = amx_ok && xisa.amx_bf16;
  const bool run_amx_int8 = amx_ok && xisa.amx_int8;
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  const int reps = opt.reps > 0 ? opt.reps : (opt.quick ? 3 : 10);
  const double seconds = opt.quick ? 0.05 : 0.25;

  long l3_sysconf = 0;
  const long l1 = cache_size(1, nullptr), l2 = cache_size(2, nullptr), l3 = cache_size(3, &l3_sysconf);
  long bytes = opt.mb > 0 ? opt.mb * 1024L * 1024L
                          : std::min(std::max(4 * l3, 256L << 20), 1024L << 20);
  if (opt.quick && opt.mb <= 0) bytes = std::max(4 * l3, 128L << 20);
  const long n = bytes / 4 / 64 * 64;
  bytes = n * 4;

  std::fprintf(stderr, "machine_limits: %d threads, arrays of %ld MiB, %d reps\n", threads, bytes >> 20, reps);
  float* a = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4));
  float* b = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4));
  float* c = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4));
  if (!a || !b || !c) {
    std::fprintf(stderr, "machine_limits: out of memory for %ld MiB arrays\n", bytes >> 20);
    return 1;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long i = 0; i < n; ++i) {
    a[i] = 1.0f;
    b[i] = 2.0f;
    c[i] = 0.0f;
  }
  Bandwidth bw_all = stream(a, b, c, n, threads, reps);
  Bandwidth bw_one = stream(a, b, c, n, 1, std::max(2, reps / 2));
  std::free(a);
  std::free(b);
  std::free(c);

  Kernel fma = has_avx512 ? fma_avx512 : (has_avx2 ? fma_avx2 : nullptr);
  const char* fma_isa = has_avx512 ? "avx512" : (has_avx2 ? "avx2" : "none");
  double fma_all = 0, fma_one = 0, avx2_all = 0, avx2_one = 0;
  if (fma) {
    std::fprintf(stderr, "machine_limits: fp32 FMA (%s)\n", fma_isa);
    fma_all = peak(fma, threads, reps, seconds);
    fma_one = peak(fma, 1, reps, seconds);
  }
  if (has_avx512 && has_avx2) {
    avx2_all = peak(fma_avx2, threads, reps, seconds);
    avx2_one = peak(fma_avx2, 1, reps, seconds);
  }
  double bf16_all = 0, bf16_one = 0, i8_all = 0, i8_one = 0;
  if (has_bf16) {
    std::fprintf(stderr, "machine_limits: bf16 dot\n");
    bf16_all = peak(dot_bf16, threads, reps, seconds);
    bf16_one = peak(dot_bf16, 1, reps, seconds);
  }
  if (has_vnni) {
    std::fprintf(stderr, "machine_limits: int8 dot\n");
    i8_all = peak(dot_int8, threads, reps, seconds);
    i8_one = peak(dot_int8, 1, reps, seconds);
  }
  const bool run_int8_avx2 = has_avx2 && !has_vnni;
  double i8_avx2_all = 0, i8_avx2_one = 0;
  if (run_int8_avx2) {
    std::fprintf(stderr, "machine_limits: int8 (AVX2 vpmaddubsw)\n");
    i8_avx2_all = peak(dot_int8_avx2, threads, reps, seconds);
    i8_avx2_one = peak(dot_int8_avx2, 1, reps, seconds);
  }
  double amx_bf16_all = 0, amx_bf16_one = 0, amx_i8_all = 0, amx_i8_one = 0, fp16_all = 0, fp16_one = 0;
  if (run_amx_bf16) {
    std::fprintf(stderr, "machine_limits: AMX bf16 tiles\n");
    amx_bf16_all = peak(amx_bf16, threads, reps, seconds);
    amx_bf16_one = peak(amx_bf16, 1, reps, seconds);
  }
  if (run_amx_int8) {
    std::fprintf(stderr, "machine_limits: AMX int8 tiles\n");
    amx_i8_all = peak(amx_int8, threads, reps, seconds);
    amx_i8_one = peak(amx_int8, 1, reps, seconds);
  }
  if (!amx_ok) std::fprintf(stderr, "machine_limits: no AMX tiles (%s)\n", amx_permission.c_str());
  if (has_fp16) {
    std::fprintf(stderr, "machine_limits: fp16 FMA (AVX512_FP16)\n");
    fp16_all = peak(fma_fp16, threads, reps, seconds);
    fp16_one = peak(fma_fp16, 1, reps, seconds);
  }
  // The floor of a dtype is set by the fastest unit that computes it (issue 13: "honest floors").
  const bool have_bf16 = has_bf16 || run_amx_bf16, have_int8 = has_vnni || run_amx_int8 || run_int8_avx2;
  const bool bf16_amx = run_amx_bf16 && amx_bf16_all > bf16_all;
  const bool int8_amx = run_amx_int8 && amx_i8_all > i8_all;
  const double bf16_best = bf16_amx ? amx_bf16_all : bf16_all;
  const double int8_best = int8_amx ? amx_i8_all : run_int8_avx2 ? i8_avx2_all : i8_all;
  const char* bf16_unit = !have_bf16 ? "null" : bf16_amx ? "\"amx\"" : "\"avx512_bf16\"";
  const char* int8_unit = !have_int8 ? "null" : int8_amx ? "\"amx\"" : run_int8_avx2 ? "\"avx2\"" : "\"avx512_vnni\"";
  const double fp32_peak = std::max(fma_all, avx2_all);
  const double mem_peak = std::max({bw_all.copy, bw_all.scale, bw_all.add, bw_all.triad, bw_all.read, bw_all.copy_nt});

  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  auto bwj = [](const Bandwidth& b) {
    char s[256];
    std::snprintf(s, sizeof s,
                  "{\"copy\": %.2f, \"scale\": %.2f, \"add\": %.2f, \"triad\": %.2f, \"read\": %.2f, \"copy_nt\": %.2f}",
                  b.copy, b.scale, b.add, b.triad, b.read, b.copy_nt);
    return std::string(s);
  };
  auto opt_num = [](bool present, double v) {
    if (!present) return std::string("null");
    char s[64];
    std::snprintf(s, sizeof s, "%.1f", v);
    return std::string(s);
  };
  std::printf("{\n");
  std::printf("  \"tool\": \"machine_limits\",\n");
  std::printf("  \"host\": \"%s\",\n", json_escape(host).c_str());
  std::printf("  \"cpu\": \"%s\",\n", json_escape(cpu_model()).c_str());
  std::printf("  \"threads\": %d,\n", threads);
  std::printf("  \"compiler\": \"%s\",\n", json_escape(__VERSION__).c_str());
  std::printf("  \"quick\": %s,\n", opt.quick ? "true" : "false");
  auto tf = [](bool b) { return b ? "true" : "false"; };
  std::printf("  \"isa\": {\"avx2_fma\": %s, \"avx512f\": %s, \"avx512_bf16\": %s, \"avx512_vnni\": %s, \"amx_tile\": %s, "
              "\"amx_bf16\": %s, \"amx_int8\": %s, \"avx512_fp16\": %s},\n",
              tf(has_avx2), tf(has_avx512), tf(has_bf16), tf(has_vnni), tf(has_amx), tf(has_amx_bf16), tf(has_amx_int8),
              tf(cpu_fp16));
  std::printf("  \"amx_permission\": \"%s\",\n", json_escape(amx_permission).c_str());
  std::printf("  \"caches_bytes\": {\"l1d\": %ld, \"l2\": %ld, \"l3\": %ld, \"l3_sysconf\": %ld},\n", l1, l2, l3, l3_sysconf);
  std::printf("  \"bandwidth_GBps\": {\n");
  std::printf("    \"array_bytes\": %ld, \"reps\": %d, \"convention\": \"STREAM: write-allocate reads not counted\",\n", bytes, reps);
  std::printf("    \"all_cores\": %s,\n", bwj(bw_all).c_str());
  std::printf("    \"one_core\": %s\n", bwj(bw_one).c_str());
  std::printf("  },\n");
  std::printf("  \"fp32_fma_GFLOPs\": {\"isa\": \"%s\", \"all_cores\": %.1f, \"one_core\": %.1f, \"avx2_all_cores\": %s, \"avx2_one_core\": %s},\n",
              fma_isa, fma_all, fma_one, opt_num(has_avx512 && has_avx2, avx2_all).c_str(),
              opt_num(has_avx512 && has_avx2, avx2_one).c_str());
  // {all_cores, one_core} of a unit, or null when it did not run.
  auto both = [&](bool present, double all, double one) {
    return present ? "{\"all_cores\": " + opt_num(true, all) + ", \"one_core\": " + opt_num(true, one) + "}"
                   : std::string("null");
  };
  std::printf("  \"bf16_dot_GFLOPs\": %s,\n", both(has_bf16, bf16_all, bf16_one).c_str());
  std::printf("  \"int8_dot_GOPs\": %s,\n", both(has_vnni, i8_all, i8_one).c_str());
  std::printf("  \"int8_avx2_GOPs\": %s,\n", both(run_int8_avx2, i8_avx2_all, i8_avx2_one).c_str());
  std::printf("  \"bf16_amx_GFLOPs\": %s,\n", both(run_amx_bf16, amx_bf16_all, amx_bf16_one).c_str());
  std::printf("  \"int8_amx_GOPs\": %s,\n", both(run_amx_int8, amx_i8_all, amx_i8_one).c_str());
  std::printf("  \"fp16_fma_GFLOPs\": %s,\n", both(has_fp16, fp16_all, fp16_one).c_str());
  std::printf("  \"limits\": {\"mem_GBps\": %.2f, \"mem_GBps_one_core\": %.2f, \"fp32_GFLOPs\": %.1f, \"bf16_GFLOPs\": %s, \"int8_GOPs\": %s,\n",
              mem_peak,
              std::max({bw_one.copy, bw_one.scale, bw_one.add, bw_one.triad, bw_one.read, bw_one.copy_nt}), fp32_peak,
              opt_num(have_bf16, bf16_best).c_str(), opt_num(have_int8, int8_best).c_str());
  std::printf("             \"fp32_unit\": \"%s\", \"bf16_unit\": %s, \"int8_unit\": %s, \"fp16_GFLOPs\": %s, \"fp16_unit\": %s,\n",
              fp32_peak > fma_all ? "avx2" : fma_isa, bf16_unit, int8_unit, opt_num(has_fp16, fp16_all).c_str(),
              has_fp16 ? "\"avx512_fp16\"" : "null");
  std::printf("             \"bf16_dot_GFLOPs\": %s, \"bf16_amx_GFLOPs\": %s, \"int8_dot_GOPs\": %s, \"int8_amx_GOPs\": %s,\n",
              opt_num(has_bf16, bf16_all).c_str(), opt_num(run_amx_bf16, amx_bf16_all).c_str(),
              opt_num(has_vnni, i8_all).c_str(), opt_num(run_amx_int8, amx_i8_all).c_str());
  std::printf("             \"int8_avx2_GOPs\": %s, \"mem_read_GBps\": %.2f, \"mem_read_GBps_one_core\": %.2f}\n",
              opt_num(run_int8_avx2, i8_avx2_all).c_str(), bw_all.read, bw_one.read);
  std::printf("}\n");
  return 0;
}
