// One core: exp + sum over a cached bf16 row with exp2 polynomials of degree 6, 5, 4 and an integer 2^k (NOTE.md).
#include "redfuse_cpu.h"
#include <chrono>
#include <cstdio>
#include <cstring>
template <int D> struct E {
    __m512 c[7];
    E() { const float d6[6] = {0x1.446c7ep-13f, 0x1.5f88fep-10f, 0x1.3b29e4p-7f, 0x1.c6ae2cp-5f, 0x1.ebfbe0p-3f, 0x1.62e432p-1f};
          const float d5[5] = {0x1.5bb9f8p-10f, 0x1.3cea86p-7f, 0x1.c6b754p-5f, 0x1.ebf9bcp-3f, 0x1.62e42ap-1f};
          const float d4[4] = {0x1.3a02a0p-7f, 0x1.c9fc3ap-5f, 0x1.ec0378p-3f, 0x1.62e12cp-1f};
          const float *s = D == 6 ? d6 : D == 5 ? d5 : d4; for (int i = 0; i < D; i++) c[i] = _mm512_set1_ps(s[i]); c[D] = _mm512_set1_ps(1.0f); }
    inline __m512 operator()(__m512 v) const {
        __m512 k = _mm512_maskz_roundscale_ps(0xFFFF, v, 8), r = _mm512_maskz_reduce_ps(0xFFFF, v, 8);
        __m512 p = _mm512_fmadd_ps(c[0], r, c[1]);
        for (int i = 2; i <= D; i++) p = _mm512_fmadd_ps(p, r, c[i]);
        return _mm512_maskz_scalef_ps(0xFFFF, p, k);
    }
};
struct EI {
    __m512 c[7];
    EI() { const float d6[6] = {0x1.446c7ep-13f, 0x1.5f88fep-10f, 0x1.3b29e4p-7f, 0x1.c6ae2cp-5f, 0x1.ebfbe0p-3f, 0x1.62e432p-1f};
          for (int i = 0; i < 6; i++) c[i] = _mm512_set1_ps(d6[i]); c[6] = _mm512_set1_ps(1.0f); }
    inline __m512 operator()(__m512 v) const {
        v = _mm512_max_ps(v, _mm512_set1_ps(-126.0f));
        __m512 k = _mm512_maskz_roundscale_ps(0xFFFF, v, 8); __m512 r = _mm512_sub_ps(v, k);
        __m512 p = _mm512_fmadd_ps(c[0], r, c[1]);
        for (int i = 2; i <= 6; i++) p = _mm512_fmadd_ps(p, r, c[i]);
        return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(_mm512_cvtps_epi32(k), 23)));
    }
};
template <int D> float run(float *dst, const uint16_t *src, int64_t n, float c, float a) {
    typename std::conditional<D == 0, EI, E<D == 0 ? 6 : D>>::type e; const __m512 vc = _mm512_set1_ps(c), va = _mm512_set1_ps(a); __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (int64_t i = 0; i < n; i += 32) {
        __m512 e0 = e(_mm512_mul_ps(_mm512_add_ps(rfk::row_vector(src + i, 0xFFFF), vc), va));
        __m512 e1 = e(_mm512_mul_ps(_mm512_add_ps(rfk::row_vector(src + i + 16, 0xFFFF), vc), va));
        _mm512_storeu_ps(dst + i, e0); _mm512_storeu_ps(dst + i + 16, e1);
        s0 = _mm512_add_ps(s0, e0); s1 = _mm512_add_ps(s1, e1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
int main(){
  const int64_t C=8192; static uint16_t x[C]; static float t[C];
  for(int i=0;i<C;i++){float f=(i%97)/25.0f-2; uint32_t u; memcpy(&u,&f,4); x[i]=u>>16;}
  int N=20000; float s=0;
  for (int rep=0; rep<3; rep++) {
  auto t0=std::chrono::steady_clock::now(); for(int r=0;r<N;r++) s+=rfk::exp2_row_sum(t,x,C,-1.0f,1.44f,0.0f);
  auto t1=std::chrono::steady_clock::now(); for(int r=0;r<N;r++) s+=run<6>(t,x,C,-1.0f,1.44f);
  auto t2=std::chrono::steady_clock::now(); for(int r=0;r<N;r++) s+=run<5>(t,x,C,-1.0f,1.44f);
  auto t3=std::chrono::steady_clock::now(); for(int r=0;r<N;r++) s+=run<4>(t,x,C,-1.0f,1.44f);
  auto t4=std::chrono::steady_clock::now(); for(int r=0;r<N;r++) s+=run<0>(t,x,C,-1.0f,1.44f);
  auto t5=std::chrono::steady_clock::now();
  auto ns=[&](auto a, auto b){return std::chrono::duration<double,std::nano>(b-a).count()/N/C;};
  printf("ns/elem: lib %.3f deg6 %.3f deg5 %.3f deg4 %.3f int-scale %.3f (%g)\n", ns(t0,t1), ns(t1,t2), ns(t2,t3), ns(t3,t4), ns(t4,t5), s);
  }
}
