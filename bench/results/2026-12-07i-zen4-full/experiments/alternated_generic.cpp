// Alternates calls of emitted kernels (shared objects, dlopen) of one spec, one call each per round,
// same inputs (f32 / bf16 / i32 buffers, uniform in [-4, 4]); args: rounds "N1,N2,..." (sizes in spec
// order) a.so b.so ...; prints per kernel min / p25 / median and a hash of the outputs.
// Used for run 07d's variance experiment (NOTE.md). Build: g++ -O2 -std=c++17 alternated_generic.cpp -ldl
// Run 07i's copy: ALT_ELEMS=N sets the elements per buffer (default: the product of the sizes, too much for
// GEMMs), and i8 inputs are filled too (uniform in [-120, 120]).
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
typedef int (*int_fn)(void);
typedef int (*int_i_fn)(int);
int main(int argc, char **argv) {
  int rounds = atoi(argv[1]);
  std::vector<int64_t> sizes;
  for (char *p = argv[2]; *p;) { sizes.push_back(strtoll(p, &p, 10)); if (*p == ',') p++; }
  std::vector<run_fn> fns;
  void *h0 = nullptr;
  for (int i = 3; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("%s\n", dlerror()); return 1; }
    if (!h0) h0 = h;
    fns.push_back((run_fn)dlsym(h, "redfuse_run"));
  }
  int nb = ((int_fn)dlsym(h0, "redfuse_num_buffers"))();
  auto dtype = (int_i_fn)dlsym(h0, "redfuse_buffer_dtype");
  auto is_out = (int_i_fn)dlsym(h0, "redfuse_buffer_is_output");
  // Buffer sizes: the product of the sizes is an upper bound for every buffer of these specs.
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  if (getenv("ALT_ELEMS")) n = atoll(getenv("ALT_ELEMS"));
  std::vector<void *> bufs(nb);
  std::vector<std::vector<unsigned char>> outs(fns.size());
  uint32_t s = 1;
  auto rnd = [&]() { s = s * 1664525u + 1013904223u; return ((s >> 8) / 16777216.0f) * 8 - 4; };
  for (int b = 0; b < nb; b++) {
    bufs[b] = aligned_alloc(64, (size_t)n * 8 + 64);
    memset(bufs[b], 0, (size_t)n * 8);
    if (is_out(b)) continue;
    if (dtype(b) == 1) for (int64_t i = 0; i < n; i++) ((float *)bufs[b])[i] = rnd();
    if (dtype(b) == 6) for (int64_t i = 0; i < n; i++) ((signed char *)bufs[b])[i] = (signed char)(rnd() * 30);
    if (dtype(b) == 3) for (int64_t i = 0; i < n; i++) { float f = rnd(); uint32_t u; memcpy(&u, &f, 4); ((uint16_t *)bufs[b])[i] = (uint16_t)(u >> 16); }
  }
  std::vector<std::vector<double>> t(fns.size());
  std::vector<uint64_t> hash(fns.size());
  for (size_t k = 0; k < fns.size(); k++) {
    fns[k](sizes.data(), bufs.data(), 2);
    uint64_t h = 1469598103934665603ull;
    for (int b = 0; b < nb; b++)
      if (is_out(b)) for (int64_t i = 0; i < n * 2; i++) h = (h ^ ((unsigned char *)bufs[b])[i]) * 1099511628211ull;
    hash[k] = h;
  }
  for (int r = 0; r < rounds; r++)
    for (size_t k = 0; k < fns.size(); k++) {
      auto t0 = std::chrono::steady_clock::now();
      fns[k](sizes.data(), bufs.data(), 2);
      t[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  for (size_t k = 0; k < fns.size(); k++) {
    std::sort(t[k].begin(), t[k].end());
    printf("%-32s min %.4f p25 %.4f median %.4f ms hash %016llx\n", argv[3 + k], t[k][0], t[k][t[k].size() / 4], t[k][t[k].size() / 2],
           (unsigned long long)hash[k]);
  }
}
