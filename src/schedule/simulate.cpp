#include "schedule/simulate.hpp"

#include <algorithm>

#include "schedule/reduce_scatter.hpp"

namespace rdmacoll::schedule {

namespace {

// Counts and times every rank's schedule (index = rank); a transfer moves count x m bytes.
SimResult simulate_schedules(const std::vector<Schedule>& all, const std::vector<int>& host_of,
                             uint64_t m, const AlphaBeta& ab) {
  const int p = static_cast<int>(host_of.size());
  const int hosts = p ? *std::max_element(host_of.begin(), host_of.end()) + 1 : 0;
  SimResult r;
  r.offhost_bytes.assign(hosts, 0);
  r.steps = p ? static_cast<int>(all[0].steps.size()) : 0;
  for (int s = 0; s < r.steps; ++s) {
    // A rank's writes in a step go out one after another; a host's off-host bytes share its NIC.
    std::vector<double> rank_us(p, 0.0);
    std::vector<double> rank_inter_us(p, 0.0);
    std::vector<double> host_us(hosts, 0.0);
    std::vector<uint64_t> host_bytes(hosts, 0);
    for (int rank = 0; rank < p; ++rank) {
      for (const Transfer& t : all[rank].steps[s].sends) {
        const uint64_t bytes = static_cast<uint64_t>(t.count) * m;
        if (host_of[t.peer] != host_of[rank]) {
          r.offhost_bytes[host_of[rank]] += bytes;
          host_bytes[host_of[rank]] += bytes;
          rank_inter_us[rank] += ab.alpha_inter_us;
        } else {
          rank_us[rank] += ab.alpha_intra_us + bytes / (ab.beta_intra_gbps * 1e3);
        }
      }
    }
    double step = 0;
    for (int rank = 0; rank < p; ++rank) {
      step = std::max(step, rank_us[rank]);
      host_us[host_of[rank]] = std::max(host_us[host_of[rank]], rank_inter_us[rank]);
    }
    for (int h = 0; h < hosts; ++h) {
      step = std::max(step, host_us[h] + host_bytes[h] / (ab.beta_inter_gbps * 1e3));
    }
    r.time_us += step;
  }
  for (uint64_t b : r.offhost_bytes)
    r.total_offhost += b;
  return r;
}

}  // namespace

SimResult simulate(Algorithm a, const std::vector<int>& host_of, const std::vector<int>& order,
                   uint64_t m, const AlphaBeta& ab) {
  std::vector<Schedule> all;
  for (int rank = 0; rank < static_cast<int>(host_of.size()); ++rank)
    all.push_back(make_schedule(a, order, rank, host_of));
  return simulate_schedules(all, host_of, m, ab);
}

bool two_level_sends_less(Algorithm flat, const std::vector<int>& host_of,
                          const std::vector<int>& order) {
  const int p = static_cast<int>(host_of.size());
  if (p > kTwoLevelMaxSimulatedRanks || flat == Algorithm::TwoLevel) return false;
  if (p < 3 || *std::max_element(host_of.begin(), host_of.end()) == 0) return false;
  return simulate(Algorithm::TwoLevel, host_of, order, 1).total_offhost <
         simulate(flat, host_of, order, 1).total_offhost;
}

SimResult simulate_reduce_scatter(Algorithm a, const std::vector<int>& host_of,
                                  const std::vector<int>& order, uint64_t piece_bytes,
                                  const AlphaBeta& ab) {
  std::vector<Schedule> all;
  const int p = static_cast<int>(host_of.size());
  for (int rank = 0; rank < p; ++rank) {
    all.push_back(a == Algorithm::Ring ? ring_reduce_scatter(order, rank)
                                       : direct_reduce_scatter(p, rank));
  }
  return simulate_schedules(all, host_of, piece_bytes, ab);
}

}  // namespace rdmacoll::schedule
