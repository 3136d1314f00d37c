// Does async work overlap with the caller's computation? Each rank times, back to back:
//  - comm:    an async all_gather_into_tensor of -s bytes per rank, waited for at once;
//  - compute: -m milliseconds of the caller's own arithmetic;
//  - both:    the all-gather issued, then the computation, then the wait.
// Overlap works when both ~ max(comm, compute), not comm + compute. Every gathered element is
// checked. Run under rdmacoll-run (or any launcher): rdmacoll-run -n 2 overlap_perf

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <rdmacoll/rdmacoll.hpp>

using namespace rdmacoll;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The caller's own work: arithmetic until `ms` have passed (what a backward pass would do
// with the core meanwhile).
double compute(double ms) {
  const auto t0 = Clock::now();
  double x = 1.0;
  while (ms_since(t0) < ms) {
    for (int i = 0; i < 10000; ++i)
      x = x * 1.0000001 + 1e-9;
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 16u << 20;
  double compute_ms = 100;
  int iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-s")
      bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "-m")
      compute_ms = std::strtod(argv[i + 1], nullptr);
    else if (a == "-n")
      iters = std::atoi(argv[i + 1]);
  }
  init_process_group();
  const int rank = get_rank(), world = get_world_size();
  const int64_t n = static_cast<int64_t>(bytes / 4);
  Tensor in = zeros({n}), out = zeros({world * n});
  for (int64_t i = 0; i < n; ++i)
    in.set(i, static_cast<double>((rank * 7 + i) % 1000));
  double comm = 0, alone = 0, both = 0, sink = 0;
  int64_t wrong = 0;
  all_gather_into_tensor(out, in);  // warm-up: connections and registrations
  for (int it = 0; it < iters; ++it) {
    barrier();
    auto t0 = Clock::now();
    all_gather_into_tensor(out, in, {}, true).wait();
    comm += ms_since(t0) / iters;
    barrier();
    t0 = Clock::now();
    sink += compute(compute_ms);
    alone += ms_since(t0) / iters;
    barrier();
    t0 = Clock::now();
    Work w = all_gather_into_tensor(out, in, {}, true);
    sink += compute(compute_ms);
    w.wait();
    both += ms_since(t0) / iters;
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < n; ++i)
        wrong += out.item(r * n + i) != static_cast<double>((r * 7 + i) % 1000);
    }
  }
  Tensor w = Tensor::view(&wrong, DType::Int64, {1});
  all_reduce(w);
  if (rank == 0) {
    std::printf(
        "# overlap: %d ranks, async all_gather_into_tensor of %zu bytes per rank, %.0f ms "
        "of computation, mean of %d\n",
        world, bytes, compute_ms, iters);
    std::printf(
        "comm %.2f ms, compute %.2f ms, comm+compute %.2f ms, overlapped %.2f ms "
        "(max %.2f ms), #wrong %lld\n",
        comm, alone, comm + alone, both, comm > alone ? comm : alone,
        static_cast<long long>(wrong));
  }
  destroy_process_group();
  return wrong == 0 && sink != 0 ? 0 : 1;
}
