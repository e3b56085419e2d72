// Alternates calls of emitted int8 quant->GEMM kernels (shared objects), one call each per round; prints
// min / p25 / median per kernel and whether the outputs are bit-identical (args: rounds M N K so...).
#include <dlfcn.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
typedef int (*run_fn)(const int64_t *, void *const *, int);
int main(int argc, char **argv) {
  int rounds = atoi(argv[1]);
  int64_t M = atoll(argv[2]), N = atoll(argv[3]), K = atoll(argv[4]);
  std::vector<run_fn> fns;
  for (int i = 5; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("%s\n", dlerror()); return 1; }
    fns.push_back((run_fn)dlsym(h, "redfuse_run"));
  }
  int64_t sizes[3] = {M, N, K};
  std::vector<uint16_t> A(M * K);
  std::vector<int8_t> W(N * K);
  std::vector<float> sw(N);
  std::vector<std::vector<uint16_t>> C(fns.size(), std::vector<uint16_t>(M * N));
  uint32_t s = 1;
  auto rnd = [&]() { s = s * 1664525u + 1013904223u; return ((s >> 8) / 16777216.0f) * 2 - 1; };
  for (auto &a : A) { float f = rnd(); uint32_t u; memcpy(&u, &f, 4); a = uint16_t(u >> 16); }
  for (auto &w : W) w = int8_t(int(rnd() * 128 - 0.5f));
  for (auto &x : sw) x = 0.01f * (1 + rnd());
  std::vector<std::vector<double>> t(fns.size());
  for (int r = -1; r < rounds; r++)
    for (size_t k = 0; k < fns.size(); k++) {
      void *bufs[4] = {A.data(), W.data(), sw.data(), C[k].data()};
      auto t0 = std::chrono::steady_clock::now();
      fns[k](sizes, bufs, 2);
      if (r >= 0) t[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  for (size_t k = 0; k < fns.size(); k++) {
    std::sort(t[k].begin(), t[k].end());
    int diff = 0;
    for (size_t i = 0; i < C[k].size(); i++) diff += C[k][i] != C[0][i];
    printf("%-20s min %.3f p25 %.3f median %.3f ms  outputs differing from the first: %d of %zu\n", argv[5 + k], t[k][0], t[k][t[k].size() / 4], t[k][t[k].size() / 2], diff, C[k].size());
  }
}
