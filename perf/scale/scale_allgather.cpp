// One rank of the scaling benchmark (perf/scale/scale.py): all_gather_into_tensor of BYTES per
// rank, timed as nccl-tests and OSU do (a barrier, then ITERS calls back to back, the elapsed
// time over ITERS, the slowest rank's), every element of every rank's output checked after the
// timed calls, and the control messages (descriptors, acks) each rank sent per call, read from
// the transport's counter around the timed calls, and the peers each rank has connected to by
// then (the transport's footprint: UCX endpoints are opened on first use).
//   scale_allgather BYTES ITERS WARMUP [MAX_CONTROL MAX_PEERS]
// With the bounds (a ctest: scale.log_p_control_and_connections), rank 0 exits 1 when a rank
// sent more control messages per call or connected more peers than they allow, or when any
// element was wrong.
// Rank 0 prints "RESULT <bytes> <us per call> <wrong> <ranks> <max control messages per rank
// per call> <mean control messages per rank per call> <max connected peers of a rank>".

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <rdmacoll/rdmacoll.hpp>

#include "api/debug.hpp"

using namespace rdmacoll;

namespace {
int value(int rank, int64_t i) {
  return static_cast<int>((rank * 131 + i) % 1000);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: scale_allgather BYTES ITERS WARMUP [MAX_CONTROL MAX_PEERS]\n");
    return 2;
  }
  const int64_t n = std::max<int64_t>(1, std::atoll(argv[1]) / 4);
  const int iters = std::max(1, std::atoi(argv[2]));
  const int warmup = std::max(0, std::atoi(argv[3]));
  const double max_control = argc > 5 ? std::atof(argv[4]) : -1;
  const double max_peers = argc > 5 ? std::atof(argv[5]) : -1;
  init_process_group();
  const int rank = get_rank(), world = get_world_size();
  bool failed = false;
  Tensor in = zeros({n}, DType::Int32);
  for (int64_t i = 0; i < n; ++i)
    in.set(i, value(rank, i));
  Tensor out = zeros({world * n}, DType::Int32);
  for (int i = 0; i < warmup; ++i)
    all_gather_into_tensor(out, in);
  barrier();
  const uint64_t ctrl_before = detail::control_messages_sent();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    all_gather_into_tensor(out, in);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      iters;
  const double ctrl = static_cast<double>(detail::control_messages_sent() - ctrl_before) / iters;
  int64_t wrong = 0;
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < n; ++i)
      wrong += out.item(r * n + i) != value(r, i);
  }
  const double peers = static_cast<double>(detail::connected_peers());
  Tensor mine = tensor({us, ctrl, static_cast<double>(wrong), peers}, DType::Float64);
  Tensor all = zeros({world * 4}, DType::Float64);
  all_gather_into_tensor(all, mine);
  if (rank == 0) {
    double slowest = 0, ctrl_max = 0, ctrl_sum = 0, wrong_all = 0, peers_max = 0;
    for (int r = 0; r < world; ++r) {
      slowest = std::max(slowest, all.item(4 * r));
      ctrl_max = std::max(ctrl_max, all.item(4 * r + 1));
      ctrl_sum += all.item(4 * r + 1);
      wrong_all += all.item(4 * r + 2);
      peers_max = std::max(peers_max, all.item(4 * r + 3));
    }
    std::printf("RESULT %lld %.3f %.0f %d %.2f %.2f %.0f\n", static_cast<long long>(n * 4), slowest,
                wrong_all, world, ctrl_max, ctrl_sum / world, peers_max);
    if (max_control >= 0 && (ctrl_max > max_control || peers_max > max_peers || wrong_all > 0)) {
      std::printf(
          "FAILED: %.2f control messages per rank per call (at most %.0f), %.0f connected "
          "peers (at most %.0f), %.0f wrong elements\n",
          ctrl_max, max_control, peers_max, max_peers, wrong_all);
      failed = true;
    }
  }
  destroy_process_group();
  return failed ? 1 : 0;
}
