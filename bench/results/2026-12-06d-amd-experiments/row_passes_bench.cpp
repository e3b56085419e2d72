// One core, a bf16 row of 8192 in cache: ns per element of the max pass, exp + sum, and the scaled row copy (NOTE.md).
#include "redfuse_cpu.h"
#include <chrono>
#include <cstdio>
#include <cstring>
int main(){
  const int64_t C=8192; static uint16_t x[C]; static float t[C]; static uint16_t y[C*64];
  for(int i=0;i<C;i++){float f=(i%97)/25.0f-2; uint32_t u; memcpy(&u,&f,4); x[i]=u>>16;}
  float s=0; auto t0=std::chrono::steady_clock::now(); int N=20000;
  for(int r=0;r<N;r++) s+=rfk::row_max(x,C,1.0f,-1e30f);
  auto t1=std::chrono::steady_clock::now();
  for(int r=0;r<N;r++) s+=rfk::exp2_row_sum(t,x,C,-1.0f,1.44f,0.0f);
  auto t2=std::chrono::steady_clock::now();
  rfk::RowStream rs;
  for(int r=0;r<N;r++) rs.bf16(y+(r%64)*C,t,C,false,0.5f);
  auto t3=std::chrono::steady_clock::now();
  for(int r=0;r<N;r++) rs.bf16(y+(r%64)*C,t,C,true,0.5f);
  rs.flush();
  auto t4=std::chrono::steady_clock::now();
  auto ns=[&](auto a, auto b){return std::chrono::duration<double,std::nano>(b-a).count()/N/C;};
  printf("ns/elem: max %.3f  exp+sum %.3f  scaled copy(plain) %.3f  scaled copy(stream) %.3f  (%g)\n", ns(t0,t1), ns(t1,t2), ns(t2,t3), ns(t3,t4), s);
}
