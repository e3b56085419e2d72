// Calls an emitted f32 attention kernel (B = 1, H = 8; args: calls, L, D) and prints min and percentiles (NOTE.md).
#include "redfuse.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <algorithm>
#include <vector>
int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 50;
  int64_t L = argc > 2 ? atoll(argv[2]) : 512, D = argc > 3 ? atoll(argv[3]) : 128, H = 8;
  int64_t sizes[5] = {1, H, L, L, D};
  size_t n = H * L * D;
  float *Q = (float *)aligned_alloc(64, n * 4), *K = (float *)aligned_alloc(64, n * 4), *V = (float *)aligned_alloc(64, n * 4), *O = (float *)aligned_alloc(64, n * 4);
  uint32_t s = 1;
  auto rnd = [&]() { s = s * 1664525u + 1013904223u; return ((s >> 8) / 16777216.0f) * 2 - 1; };
  for (size_t i = 0; i < n; i++) { Q[i] = rnd(); K[i] = rnd(); V[i] = rnd(); }
  void *bufs[4] = {Q, K, V, O};
  std::vector<double> t;
  for (int r = 0; r < reps; r++) {
    auto t0 = std::chrono::steady_clock::now();
    redfuse_run(sizes, bufs, 2);
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  double h = 0; for (size_t i = 0; i < n; i++) h += O[i] * (double)(i % 7 + 1);
  printf("min %.3f p10 %.3f p25 %.3f median %.3f p75 %.3f p90 %.3f ms check %.6f\n", t[0], t[t.size()/10], t[t.size()/4], t[t.size() / 2], t[3*t.size()/4], t[9*t.size()/10], h);
}
