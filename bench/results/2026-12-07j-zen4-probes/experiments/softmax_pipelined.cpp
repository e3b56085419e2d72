// Probe: f32 softmax rows with the scaled streamed copy of row r-1 interleaved, tile by tile, with the
// exp2 pass of row r (software pipelining across rows), against the emitted kernel. Same ABI as emitted
// kernels (run 07d's alternated_generic.cpp). Build with -DPF=1 (the next row's burst prefetch per tile, as
// the emitted kernel) or -DPF=0, and -I the emitted kernel's directory (redfuse_cpu.h).
#include "redfuse_cpu.h"
#include <omp.h>
#include <vector>
extern "C" int redfuse_run(const int64_t *sz, void *const *b, int nt) {
  const int64_t R = sz[0], C = sz[1], T = 512;
  const float *X = (const float *)b[0]; float *Y = (float *)b[1];
  const int threads = nt > 0 ? nt : omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t r0 = R * t / n, r1 = R * (t + 1) / n;
    std::vector<float> buf0(C), buf1(C);
    float *cur = buf0.data(), *prev = buf1.data();
    float inv_prev = 0; int64_t rprev = -1;
    rfk::RowStream rs;
    for (int64_t r = r0; r < r1; ++r) {
      const float *x = X + r * C;
      float m = rfk::row_max(x, C, 1.0f, -std::numeric_limits<float>::infinity());
      float s = 0;
      for (int64_t tb = 0; tb < C; tb += T) {
        int64_t te = tb + T < C ? tb + T : C;
        if (PF && r + 1 < R) rfk::prefetch_l2(x + C + tb, (te - tb) * 4);
        s += rfk::exp2_row_sum(cur + tb, x + tb, te - tb, -m, 1.4426950408889634f, 0.0f);
        if (rprev >= 0) rs.f32(Y + rprev * C + tb, prev + tb, te - tb, true, inv_prev);
      }
      inv_prev = 1.0f / s; rprev = r; std::swap(cur, prev);
    }
    if (rprev >= 0) rs.f32(Y + rprev * C, prev, C, true, inv_prev);
    rs.flush();
  }
  return 0;
}
extern "C" int redfuse_num_sizes(void) { return 2; }
extern "C" int redfuse_num_buffers(void) { return 2; }
extern "C" int redfuse_buffer_dtype(int) { return 1; }
extern "C" int redfuse_buffer_is_output(int i) { return i > 0; }
