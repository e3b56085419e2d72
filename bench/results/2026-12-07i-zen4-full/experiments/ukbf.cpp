// Isolated bf16_b_in_place_kernel<2,8> throughput: nb A panels (32 rows x kc), 8 B rows each, hot.
// Build (run 07i NOTE.md): g++ -O3 -march=native -std=c++17 -I<emitted dir> ukbf.cpp -o x; args: kc reps ldb [panels]
#include "redfuse_simd.h"
#include <chrono>
#include <cstdio>
#include <vector>
using namespace rfk::simd_detail;
int main(int argc, char **argv) {
  int64_t kc = atoll(argv[1]); int reps = atoi(argv[2]); int64_t ldb = atoll(argv[3]); int nb = argc > 4 ? atoi(argv[4]) : 1;
  std::vector<float> ap(32 * (kc / 2) * nb, 1.0f);
  std::vector<uint16_t> b(8 * ldb, 0x3f80);
  std::vector<float> c(32 * 8 * nb);
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; r++)
    for (int p = 0; p < nb; p++)
      bf16_b_in_place_kernel<2, 8>(kc, ap.data() + p * 32 * (kc / 2), b.data(), ldb, c.data() + p * 256, 8, 1.f, false, 32);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("kc %ld ldb %ld nb %d: %.1f GFLOP/s (one core)\n", kc, ldb, nb, 2.0 * 32 * 8 * kc * reps * nb / s / 1e9);
}
