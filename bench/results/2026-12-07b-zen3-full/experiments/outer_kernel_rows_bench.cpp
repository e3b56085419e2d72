// outer_kernel<MR,2> GFLOP/s on L1 operands at several kc, alternated within the process (medians of 41).
#include "redfuse_cpu.h"
#include "redfuse_simd.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace rfk::simd_detail;
static float *a, *b, *c;
template <int MR> double once(int64_t kc) {
  int reps = int(2000000 / kc);
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; r++) { outer_kernel<MR, 2, float>(kc, a, 512, b, 16, c, 272, 1.0f, false, 16); asm volatile("" : : "r"(c) : "memory"); }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * MR * 16 * kc * reps / s / 1e9;
}
int main() {
  a = (float *)aligned_alloc(64, 64 * 512 * 4); b = (float *)aligned_alloc(64, 512 * 16 * 4); c = (float *)aligned_alloc(64, 64 * 272 * 4);
  for (int i = 0; i < 64 * 512; i++) a[i] = (i % 7) * 0.01f;
  for (int i = 0; i < 512 * 16; i++) b[i] = (i % 5) * 0.01f;
  const int64_t kcs[] = {64, 128, 256, 512};
  std::vector<double> r6[4], r5[4], r4[4];
  for (int rep = 0; rep < 41; rep++)
    for (int q = 0; q < 4; q++) { r6[q].push_back(once<6>(kcs[q])); r5[q].push_back(once<5>(kcs[q])); r4[q].push_back(once<4>(kcs[q])); }
  for (int q = 0; q < 4; q++) {
    for (auto *v : {&r6[q], &r5[q], &r4[q]}) std::sort(v->begin(), v->end());
    printf("kc %4ld: MR6 %.1f  MR5 %.1f  MR4 %.1f GF/s (medians)\n", kcs[q], r6[q][20], r5[q][20], r4[q][20]);
  }
}
