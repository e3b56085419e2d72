// Calls an emitted bf16 softmax kernel (R = 4096; args: calls, C) and prints min, median and a hash of Y (NOTE.md).
#include "redfuse.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <algorithm>
#include <vector>
int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 200;
  int64_t R = 4096, C = argc > 2 ? atoll(argv[2]) : 1024;
  int64_t sizes[2] = {R, C};
  uint16_t *X = (uint16_t *)aligned_alloc(64, R * C * 2), *Y = (uint16_t *)aligned_alloc(64, R * C * 2);
  uint32_t s = 1;
  auto rnd = [&]() { s = s * 1664525u + 1013904223u; float f = ((s >> 8) / 16777216.0f) * 8 - 4; uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); };
  for (int64_t i = 0; i < R * C; i++) X[i] = rnd();
  void *bufs[2] = {X, Y};
  std::vector<double> t;
  for (int r = 0; r < reps; r++) {
    auto t0 = std::chrono::steady_clock::now();
    redfuse_run(sizes, bufs, 2);
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  uint64_t h = 1469598103934665603ull; for (int64_t i = 0; i < R * C; i++) h = (h ^ Y[i]) * 1099511628211ull;
  printf("min %.3f median %.3f ms hash %016llx\n", t[0], t[t.size() / 2], (unsigned long long)h);
}
