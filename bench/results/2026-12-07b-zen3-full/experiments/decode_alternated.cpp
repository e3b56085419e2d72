// Alternates calls of emitted bf16 decode GQA kernels (shared objects), one call each per round; prints
// min / p25 / median per kernel and whether their outputs are bit-identical (args: rounds B Hq Hkv N D so...).
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
  int64_t B = atoll(argv[2]), Hq = atoll(argv[3]), Hkv = atoll(argv[4]), N = atoll(argv[5]), D = atoll(argv[6]);
  std::vector<run_fn> fns;
  for (int i = 7; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("%s\n", dlerror()); return 1; }
    fns.push_back((run_fn)dlsym(h, "redfuse_run"));
  }
  int64_t sizes[5] = {B, Hq, Hkv, N, D};
  std::vector<uint16_t> Q(B * Hq * D), K(B * Hkv * N * D), V(B * Hkv * N * D);
  std::vector<std::vector<uint16_t>> O(fns.size(), std::vector<uint16_t>(B * Hq * D));
  uint32_t s = 1;
  auto rnd = [&]() { s = s * 1664525u + 1013904223u; float f = ((s >> 8) / 16777216.0f) * 2 - 1; uint32_t u; memcpy(&u, &f, 4); return uint16_t(u >> 16); };
  for (auto &x : Q) x = rnd();
  for (auto &x : K) x = rnd();
  for (auto &x : V) x = rnd();
  std::vector<std::vector<double>> t(fns.size());
  for (int r = -1; r < rounds; r++)
    for (size_t k = 0; k < fns.size(); k++) {
      void *bufs[4] = {Q.data(), K.data(), V.data(), O[k].data()};
      auto t0 = std::chrono::steady_clock::now();
      fns[k](sizes, bufs, 2);
      if (r >= 0) t[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  for (size_t k = 0; k < fns.size(); k++) {
    std::sort(t[k].begin(), t[k].end());
    int diff = 0;
    for (size_t i = 0; i < O[k].size(); i++) diff += O[k][i] != O[0][i];
    printf("%-28s min %.3f p25 %.3f median %.3f ms  outputs differing from the first: %d of %zu\n", argv[7 + k], t[k][0], t[k][t[k].size() / 4], t[k][t[k].size() / 2], diff, O[k].size());
  }
}
