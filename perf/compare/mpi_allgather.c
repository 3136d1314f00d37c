/* MPI_Allgather timing, the peer for rdmacoll's all_gather_into_tensor in perf/compare; with
 * a fourth argument "allreduce", MPI_Allreduce (float SUM, in place) for rdmacoll's all_reduce.
 * Built by compare.py with Open MPI's and with MPICH's mpicc.
 *   mpirun -np N mpi_allgather BYTES_PER_RANK ITERS WARMUP [allreduce]
 * Rank 0 prints "RESULT <bytes> <mean us of the slowest rank> <wrong> <world size>". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rank 0 prints the slowest rank's mean and every rank's wrong elements; ends MPI. */
static int report(size_t bytes, double total, int iters, long wrong, int rank, int world) {
  double mean = total / iters * 1e6, slowest = 0;
  long all_wrong = 0;
  MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("RESULT %zu %.3f %ld %d\n", bytes, slowest, all_wrong, world);
  MPI_Finalize();
  return all_wrong != 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  const int warmup = argc > 3 ? atoi(argv[3]) : 3;
  if (argc > 4 && strcmp(argv[4], "allreduce") == 0) {
    const int n = (int)(bytes / sizeof(float));
    float* buf = malloc(n ? n * sizeof(float) : 1);
    for (int i = 0; i < warmup; ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double total = 0;
    for (int i = 0; i < iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      total += MPI_Wtime() - t0;
    }
    /* Check: (r + i) % 5 summed over ranks. */
    for (int i = 0; i < n; ++i) buf[i] = (float)((rank + i) % 5);
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    for (int i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += (float)((r + i) % 5);
      wrong += buf[i] != want;
    }
    free(buf);
    return report(bytes, total, iters, wrong, rank, world);
  }
  unsigned char* in = malloc(bytes ? bytes : 1);
  unsigned char* out = malloc(bytes ? bytes * world : 1);
  for (size_t i = 0; i < bytes; ++i) in[i] = (unsigned char)(rank * 7 + i);
  for (int i = 0; i < warmup; ++i) {
    MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  }
  double total = 0;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    total += MPI_Wtime() - t0;
  }
  long wrong = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < bytes; ++i) wrong += out[r * bytes + i] != (unsigned char)(r * 7 + i);
  }
  free(in);
  free(out);
  return report(bytes, total, iters, wrong, rank, world);
}
