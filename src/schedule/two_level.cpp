// The two-level (host-aware) all-gather, for layouts where the flat schedules send more than
// the minimum across hosts (uneven hosts, or a group size that is no power of two: 3 hosts x 2
// ranks, Bruck with the interleaved order sends 10 chunks off each host where 4 suffice).
//  1. inside each host, every rank writes its chunk to every other rank of the host;
//  2. the hosts' leaders (their lowest group rank) pass whole host blocks around a ring of
//     hosts, h - 1 steps;
//  3. each leader writes the other hosts' chunks to the ranks of its host.
// Host a's leader sends every block but its successor's: (p - n(a+1)) chunks, in all (h - 1) p,
// which is the least possible (each host must receive p - n(a) chunks). Every write lands at the
// chunk's final offset, as in the flat schedules. Every rank has 1 + (h - 1) + 1 steps, some
// empty, so the step count is the same on every rank.

#include <algorithm>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

Schedule two_level(const std::vector<int>& host_of, int rank) {
  const int p = static_cast<int>(host_of.size());
  const int h = p ? *std::max_element(host_of.begin(), host_of.end()) + 1 : 0;
  std::vector<std::vector<int>> members(h);  // group ranks of each host, ascending
  for (int r = 0; r < p; ++r)
    members[host_of[r]].push_back(r);
  const int mine = host_of[rank];
  const std::vector<int>& local = members[mine];
  const bool leader = local.front() == rank;
  Schedule s{Algorithm::TwoLevel, {}};

  Step gather;
  for (int peer : local) {
    if (peer == rank) continue;
    gather.sends.push_back({peer, rank, 1});
    gather.recvs.push_back({peer, peer, 1});
  }
  s.steps.push_back(std::move(gather));

  for (int j = 1; j < h; ++j) {
    Step st;
    if (leader) {
      const int next = members[(mine + 1) % h].front();
      const int prev = members[(mine - 1 + h) % h].front();
      st.sends = coalesce(next, members[(mine - j + 1 + h) % h]);
      st.recvs = coalesce(prev, members[(mine - j + h) % h]);
    }
    s.steps.push_back(std::move(st));
  }

  Step spread;
  std::vector<int> remote;
  for (int r = 0; r < p; ++r) {
    if (host_of[r] != mine) remote.push_back(r);
  }
  if (leader) {
    for (int peer : local) {
      if (peer == rank) continue;
      for (const Transfer& t : coalesce(peer, remote))
        spread.sends.push_back(t);
    }
  } else {
    spread.recvs = coalesce(local.front(), remote);
  }
  s.steps.push_back(std::move(spread));
  return s;
}

}  // namespace rdmacoll::schedule
