/* MPI_Allgather timing, the peer for rdmacoll's all_gather_into_tensor in perf/compare; with
 * a fourth argument "allreduce", MPI_Allreduce (float SUM, in place) for rdmacoll's all_reduce;
 * "reducescatter", MPI_Reduce_scatter_block (float SUM; BYTES is the input, p x the output);
 * "bcast", MPI_Bcast from rank 0; "reduce", MPI_Reduce (float SUM) to rank 0; "sendrecv",
 * MPI_Sendrecv to rank+1 from rank-1; "alltoall", MPI_Alltoall, "alltoallv", MPI_Alltoallv
 * (equal counts, the call torch's uneven splits map to), "gather", MPI_Gather to rank 0 and
 * "scatter", MPI_Scatter from rank 0 (floats; BYTES is one rank's whole input, or the root's
 * whole tensor: p pieces). Built by compare.py with Open MPI's and with MPICH's mpicc.
 *   mpirun -np N mpi_allgather BYTES_PER_RANK ITERS WARMUP [MODE]
 * Rank 0 prints "RESULT <bytes> <mean us of the slowest rank> <wrong> <world size>".
 * Timing as nccl-tests does (and every row of perf/compare): after the warm-up, one barrier,
 * then ITERS calls back to back; a rank's mean is the elapsed time over ITERS. */
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

/* One barrier, then `iters` calls back to back: the elapsed seconds. */
#define TIME_BACK_TO_BACK(total, iters, call) \
  do {                                        \
    MPI_Barrier(MPI_COMM_WORLD);              \
    const double t0_ = MPI_Wtime();           \
    for (int i_ = 0; i_ < (iters); ++i_) {    \
      call;                                   \
    }                                         \
    (total) = MPI_Wtime() - t0_;              \
  } while (0)


/* Element k of the piece rank `from` sends rank `to`, and of rank r's own data: exact floats. */
static float piece(int from, int to, int k) { return (float)(((from * 5 + to) * 7 + k) % 61); }
static float own(int r, int k) { return (float)((r * 7 + k) % 61); }

/* The modes of perf/compare's newer rows: one piece of m floats per rank pair. */
static int more_modes(const char* mode, size_t bytes, int iters, int warmup, int rank, int world) {
  const int pieces = strcmp(mode, "alltoall") == 0 || strcmp(mode, "alltoallv") == 0 ||
                     strcmp(mode, "gather") == 0 || strcmp(mode, "scatter") == 0;
  int m = (int)(bytes / sizeof(float) / (pieces ? world : 1));
  if (m < 1 && pieces) m = 1;
  const int total = pieces ? m * world : m;
  float* in = malloc((size_t)(total ? total : 1) * sizeof(float));
  float* out = malloc((size_t)(total ? total : 1) * sizeof(float));
  int* counts = malloc((size_t)world * sizeof(int));
  int* displs = malloc((size_t)world * sizeof(int));
  for (int r = 0; r < world; ++r) {
    counts[r] = m;
    displs[r] = r * m;
  }
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  /* Inputs written before timing (untouched pages read as the cache-hot zero page). */
  for (int i = 0; i < total; ++i) {
    in[i] = strcmp(mode, "alltoall") == 0 || strcmp(mode, "alltoallv") == 0 ? piece(rank, i / m, i % m)
            : strcmp(mode, "scatter") == 0                                 ? own(i / m, i % m)
            : strcmp(mode, "reduce") == 0                                  ? (float)((rank + i) % 5)
                                                                           : own(rank, i);
    out[i] = 99;
  }
#define CALL()                                                                                   \
  do {                                                                                           \
    if (strcmp(mode, "reduce") == 0)                                                             \
      MPI_Reduce(rank == 0 ? MPI_IN_PLACE : in, rank == 0 ? in : NULL, m, MPI_FLOAT, MPI_SUM, 0, \
                 MPI_COMM_WORLD);                                                                \
    else if (strcmp(mode, "sendrecv") == 0)                                                      \
      MPI_Sendrecv(in, m, MPI_FLOAT, next, 0, out, m, MPI_FLOAT, prev, 0, MPI_COMM_WORLD,        \
                   MPI_STATUS_IGNORE);                                                           \
    else if (strcmp(mode, "alltoall") == 0)                                                      \
      MPI_Alltoall(in, m, MPI_FLOAT, out, m, MPI_FLOAT, MPI_COMM_WORLD);                         \
    else if (strcmp(mode, "alltoallv") == 0)                                                     \
      MPI_Alltoallv(in, counts, displs, MPI_FLOAT, out, counts, displs, MPI_FLOAT,               \
                    MPI_COMM_WORLD);                                                             \
    else if (strcmp(mode, "gather") == 0)                                                        \
      MPI_Gather(in, m, MPI_FLOAT, out, m, MPI_FLOAT, 0, MPI_COMM_WORLD);                        \
    else                                                                                         \
      MPI_Scatter(in, m, MPI_FLOAT, out, m, MPI_FLOAT, 0, MPI_COMM_WORLD);                       \
  } while (0)
  for (int i = 0; i < warmup; ++i)
    CALL();
  double elapsed = 0;
  TIME_BACK_TO_BACK(elapsed, iters, CALL());
  /* Check: the inputs again (reduce works in place), outputs refilled, one more call. */
  for (int i = 0; i < total; ++i) {
    if (strcmp(mode, "reduce") == 0) in[i] = (float)((rank + i) % 5);
    out[i] = 99;
  }
  CALL();
#undef CALL
  long wrong = 0;
  for (int i = 0; i < total; ++i) {
    float want;
    if (strcmp(mode, "reduce") == 0) {
      if (rank != 0) break;
      want = 0;
      for (int r = 0; r < world; ++r)
        want += (float)((r + i) % 5);
      wrong += in[i] != want;
      continue;
    }
    if (strcmp(mode, "gather") == 0 && rank != 0) break;
    if (strcmp(mode, "scatter") == 0 && i >= m) break;
    if (strcmp(mode, "sendrecv") == 0)
      want = own(prev, i);
    else if (strcmp(mode, "gather") == 0)
      want = own(i / m, i % m);
    else if (strcmp(mode, "scatter") == 0)
      want = own(rank, i);
    else
      want = piece(i / m, rank, i % m);
    wrong += out[i] != want;
  }
  free(in);
  free(out);
  free(counts);
  free(displs);
  return report((size_t)total * sizeof(float), elapsed, iters, wrong, rank, world);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  const int warmup = argc > 3 ? atoi(argv[3]) : 3;
  if (argc > 4 && (strcmp(argv[4], "reduce") == 0 || strcmp(argv[4], "sendrecv") == 0 ||
                   strcmp(argv[4], "alltoall") == 0 || strcmp(argv[4], "alltoallv") == 0 ||
                   strcmp(argv[4], "gather") == 0 || strcmp(argv[4], "scatter") == 0))
    return more_modes(argv[4], bytes, iters, warmup, rank, world);
  if (argc > 4 && strcmp(argv[4], "allreduce") == 0) {
    const int n = (int)(bytes / sizeof(float));
    float* buf = malloc(n ? n * sizeof(float) : 1);
    for (int i = 0; i < warmup; ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double total = 0;
    TIME_BACK_TO_BACK(total, iters,
                      MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    /* Check: (r + i) % 5 summed over ranks. */
    for (int i = 0; i < n; ++i)
      buf[i] = (float)((rank + i) % 5);
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    for (int i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r)
        want += (float)((r + i) % 5);
      wrong += buf[i] != want;
    }
    free(buf);
    return report(bytes, total, iters, wrong, rank, world);
  }
  if (argc > 4 && strcmp(argv[4], "reducescatter") == 0) {
    /* Whole floats per rank, at least one, as all_gather_perf -o reduce_scatter rounds. */
    int m = (int)(bytes / sizeof(float) / world);
    if (m < 1) m = 1;
    float* in = malloc((size_t)m * world * sizeof(float));
    float* out = malloc((size_t)m * sizeof(float));
    for (int i = 0; i < m * world; ++i)
      in[i] = 0;
    for (int i = 0; i < warmup; ++i)
      MPI_Reduce_scatter_block(in, out, m, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double total = 0;
    TIME_BACK_TO_BACK(total, iters,
                      MPI_Reduce_scatter_block(in, out, m, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < m * world; ++i)
      in[i] = (float)((rank + i) % 5);
    MPI_Reduce_scatter_block(in, out, m, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    for (int i = 0; i < m; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r)
        want += (float)((r + rank * m + i) % 5);
      wrong += out[i] != want;
    }
    free(in);
    free(out);
    return report((size_t)m * world * sizeof(float), total, iters, wrong, rank, world);
  }
  if (argc > 4 && strcmp(argv[4], "bcast") == 0) {
    unsigned char* buf = malloc(bytes ? bytes : 1);
    /* Written before timing: untouched pages read as the zero page (cache-hot) on the root. */
    memset(buf, 1, bytes);
    for (int i = 0; i < warmup; ++i)
      MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    double total = 0;
    TIME_BACK_TO_BACK(total, iters, MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD));
    for (size_t i = 0; i < bytes; ++i)
      buf[i] = rank == 0 ? (unsigned char)(i * 7) : 0;
    MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    long wrong = 0;
    for (size_t i = 0; i < bytes; ++i)
      wrong += buf[i] != (unsigned char)(i * 7);
    free(buf);
    return report(bytes, total, iters, wrong, rank, world);
  }
  unsigned char* in = malloc(bytes ? bytes : 1);
  unsigned char* out = malloc(bytes ? bytes * world : 1);
  for (size_t i = 0; i < bytes; ++i)
    in[i] = (unsigned char)(rank * 7 + i);
  for (int i = 0; i < warmup; ++i) {
    MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  }
  double total = 0;
  TIME_BACK_TO_BACK(
      total, iters,
      MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD));
  long wrong = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < bytes; ++i)
      wrong += out[r * bytes + i] != (unsigned char)(r * 7 + i);
  }
  free(in);
  free(out);
  return report(bytes, total, iters, wrong, rank, world);
}
