#include <x86intrin.h>
#include <cstdio>
#define R12(I) I" %%ymm12, %%ymm0, %%ymm0\n" I" %%ymm12, %%ymm1, %%ymm1\n" I" %%ymm12, %%ymm2, %%ymm2\n" I" %%ymm12, %%ymm3, %%ymm3\n" \
 I" %%ymm12, %%ymm4, %%ymm4\n" I" %%ymm12, %%ymm5, %%ymm5\n" I" %%ymm12, %%ymm6, %%ymm6\n" I" %%ymm12, %%ymm7, %%ymm7\n" \
 I" %%ymm12, %%ymm8, %%ymm8\n" I" %%ymm12, %%ymm9, %%ymm9\n" I" %%ymm12, %%ymm10, %%ymm10\n" I" %%ymm12, %%ymm11, %%ymm11\n"
#define MIX(A,B) A" %%ymm12, %%ymm0, %%ymm0\n" B" %%ymm12, %%ymm1, %%ymm1\n" A" %%ymm12, %%ymm2, %%ymm2\n" B" %%ymm12, %%ymm3, %%ymm3\n" \
 A" %%ymm12, %%ymm4, %%ymm4\n" B" %%ymm12, %%ymm5, %%ymm5\n" A" %%ymm12, %%ymm6, %%ymm6\n" B" %%ymm12, %%ymm7, %%ymm7\n" \
 A" %%ymm12, %%ymm8, %%ymm8\n" B" %%ymm12, %%ymm9, %%ymm9\n" A" %%ymm12, %%ymm10, %%ymm10\n" B" %%ymm12, %%ymm11, %%ymm11\n"
#define T(NAME, BODY) { long n=10000000; unsigned long long t0=__rdtsc(); \
  asm volatile("1:\n" BODY "dec %0\n jnz 1b\n" : "+r"(n) :: "ymm0","ymm1","ymm2","ymm3","ymm4","ymm5","ymm6","ymm7","ymm8","ymm9","ymm10","ymm11","cc"); \
  printf("%-22s %.2f per tick\n", NAME, 12.0*10000000/(__rdtsc()-t0)); }
int main(){ for (int r=0;r<2;r++){
 T("vpmaddwd", R12("vpmaddwd")) T("vpmaddubsw", R12("vpmaddubsw")) T("vpsignb", R12("vpsignb")) T("vpaddd", R12("vpaddd"))
 T("vpmullw", R12("vpmullw")) T("vfmadd231ps", R12("vfmadd231ps"))
 T("madd|maddubs", MIX("vpmaddwd","vpmaddubsw")) T("madd|add", MIX("vpmaddwd","vpaddd")) T("maddubs|add", MIX("vpmaddubsw","vpaddd"))
 T("maddubs|sign", MIX("vpmaddubsw","vpsignb")) T("fma|madd", MIX("vfmadd231ps","vpmaddwd"))
}}
