#pragma once
// The connection plan: the group ranks one rank exchanges messages with over the collectives
// of a group, i.e. the connections a transport that connects on demand has to open (NCCL
// connects the neighbours of its rings and trees only, UCX its endpoints on first use).
// Plain data like the schedules: the footprint plan of the verbs transport is computed from
// it (tests/unit/transport/footprint_test.cpp), for any p, without a network.
//
// Sizes, per rank: recursive doubling log2 p peers, the ring 2, Bruck (the all-gather and the
// descriptor exchange across hosts) and the binomial broadcast trees of every root rank +- 2^k,
// at most 2 ceil(log2 p); the direct schedules p - 1.

#include <vector>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

// Whom a rank exchanges its call descriptors with: the peers of the service schedule the engine
// runs for them (schedule/service.hpp): every member (the direct round), Bruck's rounds,
// recursive doubling's, the ring step only (a ring call across hosts), or no one beyond what the
// schedules use (the mailbox carries them, on one host).
enum class DescriptorPeers { Every, Bruck, RecursiveDoubling, RingStep, Schedule };

// What a group runs, as far as connections go.
struct GroupPlan {
  Algorithm all_gather = Algorithm::Ring;
  bool ring_reduce_scatter = true;  // false: the direct reduce-scatter (every peer)
  bool broadcast = true;            // binomial trees, from any root
  DescriptorPeers descriptors = DescriptorPeers::Bruck;
};

// Group ranks `rank` sends to or receives from in `s`: sorted, each once.
std::vector<int> peers_of(const Schedule& s);

// Group ranks a binomial-tree broadcast from any root connects `rank` with: rank +- 2^k, the
// same set as the descriptor exchange of Bruck's all-gather (round d: to rank - d, from
// rank + d).
std::vector<int> broadcast_peers(int p, int rank);

// The union over everything `plan` runs, for group rank `rank`; `order` as for the schedules
// (the all-gather's and the ring reduce-scatter's), `host_of` for the two-level all-gather.
std::vector<int> connection_plan(const GroupPlan& plan, const std::vector<int>& order, int rank,
                                 const std::vector<int>& host_of = {});

}  // namespace rdmacoll::schedule
