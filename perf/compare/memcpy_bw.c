/* The physical limit for perf/compare: single-thread memcpy of BYTES (what one rank must
 * receive: (world-1) x bytes per rank). Prints "RESULT <bytes> <mean us>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  char* src = malloc(bytes ? bytes : 1);
  char* dst = malloc(bytes ? bytes : 1);
  memset(src, 1, bytes);
  memset(dst, 2, bytes);
  memcpy(dst, src, bytes);
  const double t0 = now_us();
  for (int i = 0; i < iters; ++i) {
    memcpy(dst, src, bytes);
    __asm__ __volatile__("" : : "r"(dst) : "memory"); /* keep the copy */
  }
  printf("RESULT %zu %.4f 0\n", bytes, (now_us() - t0) / iters);
  free(src);
  free(dst);
  return 0;
}
