// Alternates calls of several emitted f32 attention kernels (shared objects, dlopen), one call each per round, same inputs; prints per kernel min / p25 / median (args: rounds L D causal(0/1) kernel.so...).
#include <dlfcn.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
typedef int (*run_fn)(const int64_t *, void *const *, int);
int main(int argc, char **argv) {
  int rounds = atoi(argv[1]);
  int64_t L = atoll(argv[2]), D = atoll(argv[3]), H = 8;
  bool causal = atoi(argv[4]) != 0;
  std::vector<run_fn> fns;
  for (int i = 5; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("%s\n", dlerror()); return 1; }
    fns.push_back((run_fn)dlsym(h, "redfuse_run"));
  }
  int64_t sizes[5] = {1, H, L, L, D};
  if (causal) { sizes[3] = D; }
  size_t n = H * L * D;
  float *Q = (float *)aligned_alloc(64, n * 4), *K = (float *)aligned_alloc(64, n * 4), *V = (float *)aligned_alloc(64, n * 4), *O = (float *)aligned_alloc(64, n * 4);
  uint32_t s = 1;
  auto rnd = [&]() { s = s * 1664525u + 1013904223u; return ((s >> 8) / 16777216.0f) * 2 - 1; };
  for (size_t i = 0; i < n; i++) { Q[i] = rnd(); K[i] = rnd(); V[i] = rnd(); }
  void *bufs[4] = {Q, K, V, O};
  std::vector<std::vector<double>> t(fns.size());
  for (auto f : fns) f(sizes, bufs, 2);
  for (int r = 0; r < rounds; r++)
    for (size_t k = 0; k < fns.size(); k++) {
      auto t0 = std::chrono::steady_clock::now();
      fns[k](sizes, bufs, 2);
      t[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  for (size_t k = 0; k < fns.size(); k++) {
    std::sort(t[k].begin(), t[k].end());
    printf("%-40s min %.3f p25 %.3f median %.3f ms\n", argv[5 + k], t[k][0], t[k][t[k].size() / 4], t[k][t[k].size() / 2]);
  }
}
