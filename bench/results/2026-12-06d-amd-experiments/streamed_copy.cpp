// Two threads: a bf16 [4096, C] copy with streamed stores (mode 0) or a read-only pass (mode 1), the bandwidth bound (NOTE.md).
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <algorithm>
#include <vector>
#include <omp.h>
int main(int argc, char**argv){
  int64_t R=4096, C=argc>1?atoll(argv[1]):8192; int mode=argc>2?atoi(argv[2]):0;
  uint16_t *X=(uint16_t*)aligned_alloc(64,R*C*2), *Y=(uint16_t*)aligned_alloc(64,R*C*2);
  for(int64_t i=0;i<R*C;i++){X[i]=(uint16_t)(i*7); Y[i]=0;}
  std::vector<double> t;
  for(int r=0;r<50;r++){
    auto t0=std::chrono::steady_clock::now();
    #pragma omp parallel for num_threads(2) schedule(static)
    for(int64_t row=0;row<R;row++){
      const __m512i *s=(const __m512i*)(X+row*C); __m512i *d=(__m512i*)(Y+row*C);
      if(mode==0) for(int64_t i=0;i<C/32;i++) _mm512_stream_si512(d+i,_mm512_load_si512(s+i));
      else { __m512i acc=_mm512_setzero_si512(); for(int64_t i=0;i<C/32;i++) acc=_mm512_max_epi16(acc,_mm512_load_si512(s+i)); if(_mm512_reduce_max_epi32(acc)==12345) printf("x"); }
    }
    _mm_sfence();
    t.push_back(std::chrono::duration<double,std::milli>(std::chrono::steady_clock::now()-t0).count());
  }
  std::sort(t.begin(),t.end()); printf("C=%ld mode %d min %.3f median %.3f ms\n",C,mode,t[0],t[25]);
}
