#pragma once
// A byte-counting simulator for all-gather and reduce-scatter schedules: steps, bytes each host
// sends off-host, and an alpha-beta time estimate with separate intra- and inter-host parameters.

#include <cstdint>
#include <vector>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

struct AlphaBeta {
  double alpha_intra_us = 1.0;    // per message between ranks of one host
  double beta_intra_gbps = 10.0;  // GB/s per rank within a host
  double alpha_inter_us = 3.0;    // per message across hosts
  double beta_inter_gbps = 12.5;  // GB/s per host NIC (shared by the host's ranks)
};

struct SimResult {
  int steps = 0;
  std::vector<uint64_t> offhost_bytes;  // per host, bytes sent to other hosts
  uint64_t total_offhost = 0;
  double time_us = 0;
};

// host_of[rank] = host index; `order` is the virtual order the schedule is built with.
SimResult simulate(Algorithm a, const std::vector<int>& host_of, const std::vector<int>& order,
                   uint64_t bytes_per_rank, const AlphaBeta& ab = {});
// The selector's second opinion across hosts: true when the two-level schedule sends fewer
// off-host bytes in all than `flat` built with `order` (counted once per group; bytes scale
// with the chunk, so one byte per rank decides). Groups above kTwoLevelMaxSimulatedRanks are
// not simulated (p schedules of up to p steps each) and keep the flat pick.
constexpr int kTwoLevelMaxSimulatedRanks = 512;
bool two_level_sends_less(Algorithm flat, const std::vector<int>& host_of,
                          const std::vector<int>& order);
// The reduce-scatter's (Direct or Ring, schedule/reduce_scatter.hpp) of pieces of
// `piece_bytes` (the output's bytes per rank).
SimResult simulate_reduce_scatter(Algorithm a, const std::vector<int>& host_of,
                                  const std::vector<int>& order, uint64_t piece_bytes,
                                  const AlphaBeta& ab = {});

}  // namespace rdmacoll::schedule
