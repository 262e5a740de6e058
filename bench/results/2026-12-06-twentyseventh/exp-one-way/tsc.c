#include <stdio.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>
static uint64_t ns(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
int main(void){
  volatile uint64_t s=0; uint64_t t0=ns();
  for(int i=0;i<10000000;i++) s+=__rdtsc();
  uint64_t t1=ns();
  for(int i=0;i<10000000;i++) { unsigned a; s+=__rdtscp(&a);} 
  uint64_t t2=ns();
  for(int i=0;i<1000000;i++) s+=ns();
  uint64_t t3=ns();
  printf("rdtsc %.1f ns, rdtscp %.1f ns, clock_gettime %.1f ns\n",(t1-t0)/1e7,(t2-t1)/1e7,(t3-t2)/1e6);
  return 0;}
