// AVX2 exp2 forms on a 64 x 256 tile: current, lockstep (breadth-first), lockstep with integer scaling.
#include "redfuse_cpu.h"
#include "redfuse_simd.h"
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#define AI inline __attribute__((always_inline))
template <int U> struct Lock {
  __m256 c[6], one = _mm256_set1_ps(1.0f), lo = _mm256_set1_ps(-151.0f), hi = _mm256_set1_ps(129.0f);
  __m256i bias = _mm256_set1_epi32(127);
  Lock() { for (int t = 0; t < 6; t++) c[t] = _mm256_set1_ps(rfk::kExp2Poly[t]); }
  AI void operator()(__m256 *v) const {
    __m256 k[U], p[U];
    for (int u = 0; u < U; u++) v[u] = _mm256_min_ps(hi, _mm256_max_ps(lo, v[u]));
    for (int u = 0; u < U; u++) k[u] = _mm256_round_ps(v[u], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    for (int u = 0; u < U; u++) v[u] = _mm256_sub_ps(v[u], k[u]);
    for (int u = 0; u < U; u++) p[u] = _mm256_fmadd_ps(c[0], v[u], c[1]);
    for (int t = 2; t < 6; t++) for (int u = 0; u < U; u++) p[u] = _mm256_fmadd_ps(p[u], v[u], c[t]);
    for (int u = 0; u < U; u++) p[u] = _mm256_fmadd_ps(p[u], v[u], one);
    for (int u = 0; u < U; u++) {
      __m256i ki = _mm256_cvtps_epi32(k[u]), k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
      __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
      __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
      v[u] = _mm256_mul_ps(_mm256_mul_ps(p[u], s1), s2);
    }
  }
};
template <int U> struct Fast {
  __m256 c[6], one = _mm256_set1_ps(1.0f), magic = _mm256_set1_ps(0x1.8p23f);
  __m256 center = _mm256_set1_ps(1.0f), half_width = _mm256_set1_ps(126.5f), nosign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  Fast() { for (int t = 0; t < 6; t++) c[t] = _mm256_set1_ps(rfk::kExp2Poly[t]); }
  AI void operator()(__m256 *v) const {
    __m256 out = _mm256_setzero_ps(), t[U], p[U], r[U];
    for (int u = 0; u < U; u++) out = _mm256_or_ps(out, _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(v[u], center), nosign), half_width, _CMP_NLT_UQ));
    if (__builtin_expect(_mm256_movemask_ps(out) != 0, 0)) { Lock<U> slow; slow(v); return; }
    for (int u = 0; u < U; u++) t[u] = _mm256_add_ps(v[u], magic);
    for (int u = 0; u < U; u++) r[u] = _mm256_sub_ps(v[u], _mm256_sub_ps(t[u], magic));
    for (int u = 0; u < U; u++) p[u] = _mm256_fmadd_ps(c[0], r[u], c[1]);
    for (int k = 2; k < 6; k++) for (int u = 0; u < U; u++) p[u] = _mm256_fmadd_ps(p[u], r[u], c[k]);
    for (int u = 0; u < U; u++) p[u] = _mm256_fmadd_ps(p[u], r[u], one);
    for (int u = 0; u < U; u++) v[u] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p[u]), _mm256_slli_epi32(_mm256_castps_si256(t[u]), 23)));
  }
};
template <typename E, int U> static void rowf(float *dst, const float *src, int64_t n, float a, float b) {
  const E e;
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int64_t i = 0;
  for (; i + 8 * U <= n; i += 8 * U) {
    __m256 v[U];
    for (int u = 0; u < U; u++) v[u] = _mm256_fmadd_ps(_mm256_loadu_ps(src + i + 8 * u), va, vb);
    e(v);
    for (int u = 0; u < U; u++) _mm256_storeu_ps(dst + i + 8 * u, v[u]);
  }
}
template <typename F> double time_it(F f, std::vector<float> &S) {
  double best = 1e30;
  for (int t = 0; t < 9; t++) {
    for (size_t i = 0; i < S.size(); i++) S[i] = -(float)(i % 97) * 0.05f;
    auto t0 = std::chrono::steady_clock::now();
    for (int q = 0; q < 200; q++) for (int r = 0; r < 64; r++) f(&S[r * 272], 256);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best / (200.0 * 64 * 256) * 1e9 * 3.1 * 8;
}
#define T(E, U) time_it([](float *p, int64_t n) { rowf<E<U>, U>(p, p, n, 0.127f, -1.0f); }, S)
int main() {
  std::vector<float> S(64 * 272);
  for (int rep = 0; rep < 2; rep++) {
    printf("cur %.2f cyc/vector  ", time_it([](float *p, int64_t n) { rfk::exp2_affine_row(p, p, n, 0.127f, -1.0f); }, S));
    printf("lock U2 %.2f U4 %.2f  ", T(Lock, 2), T(Lock, 4));
    printf("fast U1 %.2f U2 %.2f U3 %.2f U4 %.2f\n", T(Fast, 1), T(Fast, 2), T(Fast, 3), T(Fast, 4));
  }
  std::vector<float> X(1 << 16), A(1 << 16), B(1 << 16);
  for (int i = 0; i < (1 << 16); i++) X[i] = -160.0f + 300.0f * i / (1 << 16);
  rfk::exp2_affine_row(A.data(), X.data(), 1 << 16, 1.0f, 0.0f);
  rowf<Fast<4>, 4>(B.data(), X.data(), 1 << 16, 1.0f, 0.0f);
  int diff = 0; for (int i = 0; i < (1 << 16); i++) diff += memcmp(&A[i], &B[i], 4) != 0;
  printf("bits differ at %d of 65536\n", diff);
}
