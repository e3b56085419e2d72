// Floor probe: Y = X row by row, non-temporal stores, 2 threads (same ABI as emitted kernels).
#include <immintrin.h>
#include <cstdint>
extern "C" int redfuse_run(const int64_t *sz, void *const *b, int threads) {
  const int64_t R = sz[0], C = sz[1];
  const float *X = (const float *)b[0]; float *Y = (float *)b[1];
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < R; r++) {
    const float *x = X + r * C; float *y = Y + r * C;
    for (int64_t i = 0; i < C; i += 8) _mm256_stream_ps(y + i, _mm256_loadu_ps(x + i));
  }
  _mm_sfence();
  return 0;
}
