// How long the ranks take to meet and to part, whichever way they meet (rdmacoll-run's store,
// or mpirun's PMIx server): `rdmacoll-run -n P rendezvous_time` against `mpirun -np P
// rendezvous_time`. Each rank times init_process_group() and destroy_process_group(); rank 0
// prints the smallest init time of any rank (the last to start waits least, so it is the
// rendezvous's own cost, not the launcher's spread) and its own destroy time, best of `rounds`.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <rdmacoll/rdmacoll.hpp>

int main(int argc, char** argv) {
  namespace dist = rdmacoll;
  using Clock = std::chrono::steady_clock;
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  double best_init = 1e30, best_destroy = 1e30;
  int world = 0, rank = 0;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    dist::init_process_group();
    const double init_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    world = dist::get_world_size();
    rank = dist::get_rank();
    dist::Tensor t = dist::tensor({init_ms}, dist::DType::Float64);
    dist::all_reduce(t, dist::ReduceOp::Min);
    const auto t1 = Clock::now();
    dist::destroy_process_group();
    const double destroy_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
    if (t.item(0) < best_init) best_init = t.item(0);
    if (destroy_ms < best_destroy) best_destroy = destroy_ms;
  }
  if (rank != 0) return 0;
  std::printf("ranks %d: init %.2f ms, destroy %.2f ms (best of %d)\n", world, best_init,
              best_destroy, rounds);
  return 0;
}
