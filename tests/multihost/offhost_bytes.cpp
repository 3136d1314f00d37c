// One rank of a multi-host run (tests/multihost/run.sh): all_gather_into_tensor of M bytes per
// rank, every element checked; then rank 0 sums, per host, the bytes the transport counted as
// written to ranks on other hosts and compares them with the simulator's prediction for the
// algorithm and rank order the engine used.   offhost_bytes BYTES_PER_RANK [reduce_scatter]
// With reduce_scatter: reduce_scatter_tensor (int32 SUM) of BYTES_PER_RANK of output per rank,
// against the simulator's reduce-scatter (the host-major ring across hosts).

#include <cstdio>
#include <cstdlib>
#include <map>

#include <rdmacoll/rdmacoll.hpp>

#include "api/debug.hpp"
#include "engine/core/tuning.hpp"
#include "engine/engine.hpp"
#include "schedule/simulate.hpp"
#include "topology/topology.hpp"

using namespace rdmacoll;

int main(int argc, char** argv) {
  const int64_t bytes = argc > 1 ? std::atoll(argv[1]) : 65536;
  const bool rs = argc > 2 && std::string(argv[2]) == "reduce_scatter";
  init_process_group();
  const int rank = get_rank(), world = get_world_size();
  const int64_t n = bytes / 4;
  int64_t wrong = 0;
  if (rs) {
    Tensor in = zeros({world * n}, DType::Int32);
    for (int64_t i = 0; i < world * n; ++i)
      in.set(i, (rank * 131 + i) % 1000);
    Tensor out = zeros({n}, DType::Int32);
    reduce_scatter_tensor(out, in);
    for (int64_t i = 0; i < n; ++i) {
      int64_t want = 0;
      for (int r = 0; r < world; ++r)
        want += (r * 131 + rank * n + i) % 1000;
      wrong += out.item(i) != want;
    }
  } else {
    Tensor in = zeros({n}, DType::Int32);
    for (int64_t i = 0; i < n; ++i)
      in.set(i, (rank * 131 + i) % 1000);
    Tensor out = zeros({world * n}, DType::Int32);
    all_gather_into_tensor(out, in);
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < n; ++i)
        wrong += out.item(r * n + i) != (r * 131 + i) % 1000;
    }
  }
  // Off-host bytes this rank wrote, read before anything else is written.
  std::vector<std::string> hosts;
  for (int r = 0; r < world; ++r)
    hosts.push_back(detail::host_of(r));
  int64_t offhost = 0;
  for (int r = 0; r < world; ++r) {
    if (hosts[r] != hosts[rank]) offhost += static_cast<int64_t>(detail::bytes_written_to(r));
  }
  Tensor mine = tensor({static_cast<double>(offhost), static_cast<double>(wrong)}, DType::Int64);
  Tensor all = zeros({world * 2}, DType::Int64);
  all_gather_into_tensor(all, mine);
  int rc = 0;
  if (rank == 0) {
    const topology::Layout layout = topology::layout_of(hosts);
    const char* flat_env = std::getenv("RDMACOLL_TOPOLOGY");
    const bool flat = flat_env && std::string(flat_env) == "flat";
    std::vector<int> interleaved = topology::interleaved_order(layout);
    std::vector<int> host_major = topology::host_major_order(layout);
    std::vector<int> sched_hosts = layout.host_of;  // what the engine's schedules know
    if (flat) {
      for (int r = 0; r < world; ++r)
        interleaved[r] = host_major[r] = r;
      sched_hosts.assign(world, 0);
    }
    const schedule::Algorithm a =
        engine::choose_algorithm(static_cast<size_t>(n) * 4, sched_hosts, interleaved, host_major,
                                 engine::Tuning::from_settings().algorithm);
    const std::vector<int>& order = a == schedule::Algorithm::Ring ? host_major : interleaved;
    // The reduce-scatter rides the host-major ring across hosts (3 ranks or more), else the
    // direct round.
    const schedule::Algorithm rs_algo =
        layout.hosts > 1 && world > 2 ? schedule::Algorithm::Ring : schedule::Algorithm::Direct;
    const auto predicted =
        rs ? schedule::simulate_reduce_scatter(rs_algo, layout.host_of,
                                               topology::host_major_order(layout),
                                               static_cast<uint64_t>(n) * 4)
           : schedule::simulate(a, layout.host_of, order, static_cast<uint64_t>(n) * 4);
    std::vector<int64_t> measured(layout.hosts, 0);
    for (int r = 0; r < world; ++r) {
      measured[layout.host_of[r]] += static_cast<int64_t>(all.item(2 * r));
      if (all.item(2 * r + 1) != 0) {
        std::printf("rank %d saw %.0f wrong elements\n", r, all.item(2 * r + 1));
        rc = 1;
      }
    }
    std::printf("%d ranks on %d hosts, %lld bytes per rank, %s %s\n", world, layout.hosts,
                static_cast<long long>(n * 4), rs ? "reduce_scatter" : "all_gather",
                schedule::algorithm_name(rs ? rs_algo : a).c_str());
    for (int h = 0; h < layout.hosts; ++h) {
      const bool ok = measured[h] == static_cast<int64_t>(predicted.offhost_bytes[h]);
      std::printf("  host %d: off-host bytes measured %lld, simulator %llu %s\n", h,
                  static_cast<long long>(measured[h]),
                  static_cast<unsigned long long>(predicted.offhost_bytes[h]),
                  ok ? "ok" : "MISMATCH");
      if (!ok) rc = 1;
    }
  }
  destroy_process_group();
  return rc;
}
