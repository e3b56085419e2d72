// Probes of variance's sweep structure (MODE 1: two sweeps + burst prefetch of the next tile; 2: skewed
// (member 1 on tile t fused with member 0 on tile t+1); 3: two sweeps, prefetch spread over sweep 2).
#include <cstdint>
#include <immintrin.h>
#include <omp.h>
static inline void pf(const void *p, int64_t bytes) { for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T1); }
static inline float hs(__m256 v) { alignas(32) float t[8]; _mm256_store_ps(t, v); float s = 0; for (int i = 0; i < 8; ++i) s += t[i]; return s; }
constexpr int64_t T = 2048;
static inline float sweepA(const float *x, float tag) {
  __m256 vt = _mm256_set1_ps(tag), a0 = _mm256_setzero_ps(), a1 = a0;
  for (int64_t j = 0; j < T; j += 16) { a0 = _mm256_add_ps(a0, _mm256_sub_ps(_mm256_loadu_ps(x + j), vt)); a1 = _mm256_add_ps(a1, _mm256_sub_ps(_mm256_loadu_ps(x + j + 8), vt)); }
  return hs(_mm256_add_ps(a0, a1));
}
template <bool Spread>
static inline void sweepB(const float *x, float c, float &sp, float &sq, const char *nx) {
  __m256 vc = _mm256_set1_ps(c), vh = _mm256_set1_ps(2 * c), m2 = _mm256_set1_ps(-2.f), p0 = _mm256_setzero_ps(), p1 = p0, q0 = p0, q1 = p0;
  for (int64_t j = 0; j < T; j += 16) {
    if (Spread && nx) _mm_prefetch(nx + j * 4, _MM_HINT_T1);
    __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + 8);
    __m256 d0 = _mm256_sub_ps(vc, x0), d1 = _mm256_sub_ps(vc, x1);
    p0 = _mm256_add_ps(p0, _mm256_mul_ps(d0, d0)); p1 = _mm256_add_ps(p1, _mm256_mul_ps(d1, d1));
    q0 = _mm256_add_ps(q0, _mm256_add_ps(vh, _mm256_mul_ps(m2, x0))); q1 = _mm256_add_ps(q1, _mm256_add_ps(vh, _mm256_mul_ps(m2, x1)));
  }
  sp = hs(_mm256_add_ps(p0, p1)); sq = hs(_mm256_add_ps(q0, q1));
}
static inline void fused(const float *xb, float c, const float *xa, float tag, float &sp, float &sq, float &sa) {
  __m256 vc = _mm256_set1_ps(c), vh = _mm256_set1_ps(2 * c), m2 = _mm256_set1_ps(-2.f), p0 = _mm256_setzero_ps(), p1 = p0, q0 = p0, q1 = p0;
  __m256 vt = _mm256_set1_ps(tag), a0 = p0, a1 = p0;
  for (int64_t j = 0; j < T; j += 16) {
    a0 = _mm256_add_ps(a0, _mm256_sub_ps(_mm256_loadu_ps(xa + j), vt)); a1 = _mm256_add_ps(a1, _mm256_sub_ps(_mm256_loadu_ps(xa + j + 8), vt));
    __m256 x0 = _mm256_loadu_ps(xb + j), x1 = _mm256_loadu_ps(xb + j + 8);
    __m256 d0 = _mm256_sub_ps(vc, x0), d1 = _mm256_sub_ps(vc, x1);
    p0 = _mm256_add_ps(p0, _mm256_mul_ps(d0, d0)); p1 = _mm256_add_ps(p1, _mm256_mul_ps(d1, d1));
    q0 = _mm256_add_ps(q0, _mm256_add_ps(vh, _mm256_mul_ps(m2, x0))); q1 = _mm256_add_ps(q1, _mm256_add_ps(vh, _mm256_mul_ps(m2, x1)));
  }
  sp = hs(_mm256_add_ps(p0, p1)); sq = hs(_mm256_add_ps(q0, q1)); sa = hs(_mm256_add_ps(a0, a1));
}
extern "C" int redfuse_run(const int64_t *sz, void *const *b, int nt) {
  const int64_t R = sz[0], C = sz[1];
  const float *X = (const float *)b[0]; float *mu = (float *)b[1], *var = (float *)b[2];
  #pragma omp parallel for schedule(dynamic, 64) num_threads(nt > 0 ? nt : omp_get_max_threads())
  for (int64_t r = 0; r < R; ++r) {
    const float *x = X + r * C;
    float tag = x[0]; double acc = 0, S0 = 0, S1 = 0; int64_t nt_ = C / T;
    auto next = [&](int64_t t) -> const char * { return (t + 2) * T <= C ? (const char *)(x + (t + 1) * T) : (r + 1 < R ? (const char *)(x + C) : nullptr); };
#if MODE == 2
    acc += sweepA(x, tag);
    for (int64_t t = 0; t < nt_; ++t) {
      float c = (float)(acc / ((t + 1) * T) + tag), sp, sq, sa = 0;
      if (t + 1 < nt_) { fused(x + t * T, c, x + (t + 1) * T, tag, sp, sq, sa); }
      else sweepB<false>(x + t * T, c, sp, sq, nullptr);
      S0 += sp; S1 += sq; acc += sa;
    }
#else
    for (int64_t t = 0; t < nt_; ++t) {
      acc += sweepA(x + t * T, tag);
      float c = (float)(acc / ((t + 1) * T) + tag), sp, sq;
      const char *nx = next(t);
      if (MODE == 1 && nx) pf(nx, T * 4);
      sweepB<MODE == 3>(x + t * T, c, sp, sq, nx);
      S0 += sp; S1 += sq;
    }
#endif
    mu[r] = (float)(acc / C + tag); var[r] = (float)(S0 / C);
  }
  return 0;
}
extern "C" int redfuse_num_sizes(void) { return 2; }
extern "C" int redfuse_num_buffers(void) { return 3; }
extern "C" int redfuse_buffer_dtype(int) { return 1; }
extern "C" int redfuse_buffer_is_output(int i) { return i > 0; }
