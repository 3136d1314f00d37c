#include "schedule/connection_plan.hpp"

#include <algorithm>

#include "schedule/binomial_tree.hpp"
#include "schedule/reduce_scatter.hpp"
#include "schedule/service.hpp"

namespace rdmacoll::schedule {

namespace {

void sort_unique(std::vector<int>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// rank + d and rank - d (mod p) for d = 1, 2, 4, ... < p.
std::vector<int> plus_minus_powers_of_two(int p, int rank) {
  std::vector<int> v;
  for (int d = 1; d < p; d <<= 1) {
    v.push_back((rank + d) % p);
    v.push_back((rank - d + p) % p);
  }
  sort_unique(v);
  return v;
}

}  // namespace

std::vector<int> peers_of(const Schedule& s) {
  std::vector<int> v;
  for (const Step& step : s.steps) {
    for (const Transfer& t : step.sends)
      v.push_back(t.peer);
    for (const Transfer& t : step.recvs)
      v.push_back(t.peer);
  }
  sort_unique(v);
  return v;
}

std::vector<int> broadcast_peers(int p, int rank) {
  // Rooted at r, v = rank - r receives from v minus its highest bit and sends to v + 2^k: over
  // all roots these are rank - 2^k and rank + 2^k. (Checked against binomial_tree() in the
  // unit test.)
  return plus_minus_powers_of_two(p, rank);
}

std::vector<int> connection_plan(const GroupPlan& plan, const std::vector<int>& order, int rank,
                                 const std::vector<int>& host_of) {
  const int p = static_cast<int>(order.size());
  std::vector<int> v = peers_of(make_schedule(plan.all_gather, order, rank, host_of));
  const std::vector<int> rs = peers_of(plan.ring_reduce_scatter ? ring_reduce_scatter(order, rank)
                                                                : direct_reduce_scatter(p, rank));
  v.insert(v.end(), rs.begin(), rs.end());
  if (plan.broadcast) {
    const std::vector<int> b = broadcast_peers(p, rank);
    v.insert(v.end(), b.begin(), b.end());
  }
  // The descriptors' rounds are schedules too (schedule/service.hpp); the mailbox needs none.
  if (plan.descriptors != DescriptorPeers::Schedule) {
    const ServiceRounds rounds = plan.descriptors == DescriptorPeers::Every ? ServiceRounds::Direct
                                 : plan.descriptors == DescriptorPeers::Bruck ? ServiceRounds::Bruck
                                 : plan.descriptors == DescriptorPeers::RecursiveDoubling
                                     ? ServiceRounds::RecursiveDoubling
                                     : ServiceRounds::RingStep;
    const std::vector<int> d = peers_of(descriptor_schedule(rounds, order, rank));
    v.insert(v.end(), d.begin(), d.end());
  }
  v.erase(std::remove(v.begin(), v.end(), rank), v.end());
  sort_unique(v);
  return v;
}

}  // namespace rdmacoll::schedule
