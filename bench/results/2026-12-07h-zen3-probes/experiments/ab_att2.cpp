// Alternates emitted attention kernels of either dtype: args rounds L D so:dtype(f32|bf16)...
#include <dlfcn.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
typedef int (*run_fn)(const int64_t *, void *const *, int);
int main(int argc, char **argv) {
  int rounds = atoi(argv[1]); int64_t L = atoll(argv[2]), D = atoll(argv[3]);
  int64_t sizes[5] = {1, 8, L, L, D}; size_t n = 8 * L * D;
  std::vector<float> src(3 * n); uint32_t s = 1;
  for (auto &x : src) { s = s * 1664525u + 1013904223u; x = ((s >> 8) / 16777216.0f) * 4 - 2; }
  struct K { run_fn f; bool bf; std::vector<void *> b; std::vector<double> t; std::string name; };
  std::vector<K> ks;
  for (int i = 4; i < argc; i++) {
    std::string a = argv[i]; auto c = a.find(':'); std::string so = a.substr(0, c), dt = a.substr(c + 1);
    void *h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL); if (!h) { printf("%s\n", dlerror()); return 1; }
    K k{(run_fn)dlsym(h, "redfuse_run"), dt == "bf16", {}, {}, a};
    for (int b = 0; b < 4; b++) {
      size_t es = k.bf ? 2 : 4; void *p = aligned_alloc(64, n * es + 64); memset(p, 0, n * es);
      if (b < 3) for (size_t j = 0; j < n; j++) { float v = src[b * n + j]; if (k.bf) { uint32_t u; memcpy(&u, &v, 4); ((uint16_t *)p)[j] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); } else ((float *)p)[j] = v; }
      k.b.push_back(p);
    }
    ks.push_back(k);
  }
  for (auto &k : ks) k.f(sizes, k.b.data(), 2);
  for (int r = 0; r < rounds; r++) for (auto &k : ks) {
    auto t0 = std::chrono::steady_clock::now(); k.f(sizes, k.b.data(), 2);
    k.t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  for (auto &k : ks) { std::sort(k.t.begin(), k.t.end()); uint64_t hsh = 1469598103934665603ull; size_t nb = n * (k.bf ? 2 : 4); for (size_t j = 0; j < nb; j++) hsh = (hsh ^ ((unsigned char *)k.b[3])[j]) * 1099511628211ull; printf("%-28s min %.2f p25 %.2f median %.2f ms hash %016llx\n", k.name.c_str(), k.t[0], k.t[k.t.size() / 4], k.t[k.t.size() / 2], (unsigned long long)hsh); }
}
