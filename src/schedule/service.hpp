#pragma once
// The control plane as schedules. A call's descriptors are all-gathered, each rank's chunk its
// serialized descriptor, on the same plain-data schedules as the data: the peers a call talks to
// and the order of its rounds are the data schedules' (proven in
// tests/unit/schedule/schedule_test.cpp), and the connection plan takes them from here.
//
//  - Direct: one round, every member to every member (one host, where the messages are copies
//    through shared memory, or the mailbox replaces them).
//  - Bruck, in the group's ring order: ceil(log2 p) rounds for any p.
//  - RecursiveDoubling, in the group's virtual order (p a power of two): a rank talks only to
//    the recursive-doubling all-gather's own peers.
//  - RingStep: Bruck's first round, to the ring predecessor and from the successor, which is all
//    a ring call needs (it writes to its successor only).
//  - Rooted (rooted_schedule): what gather, scatter and reduce need, where only the root needs
//    every descriptor and the others need the root's alone. A binomial gather to the root, then
//    a binomial broadcast of the root's chunk (its descriptor or its verdict) back down the same
//    tree: a descriptor moves once per level it climbs, at most (p / 2) log2 p in all, where the
//    all-gather moves p (p - 1).

#include <vector>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

enum class ServiceRounds { Direct, Bruck, RecursiveDoubling, RingStep };

// The descriptor all-gather of group rank `rank`; `order` is the ring order for Bruck and the
// ring step, the virtual order for recursive doubling (ignored by Direct).
Schedule descriptor_schedule(ServiceRounds rounds, const std::vector<int>& order, int rank);

// The rooted rounds of group rank `rank` for root `root`, 2 ceil(log2 p) steps, in positions v =
// (position in `order` - the root's) mod p: the first ceil(log2 p) gather (step k: v whose
// lowest set bit is 2^k sends its subtree [v, v + 2^k) to v - 2^k; the subtree's chunks are
// contiguous in `order`), the last ceil(log2 p) send chunk `root` back down, largest subtree
// first. Over all roots a rank's peers are order's position +- 2^k: Bruck's.
Schedule rooted_schedule(const std::vector<int>& order, int root, int rank);

// Whether gather, scatter and reduce take the rooted rounds rather than the all-gather of
// descriptors, for p ranks on `hosts` hosts, at most `per_host` on one, descriptors of at most
// `descriptor_bytes`. The tree costs ceil(log2 p) + 1 more dependent messages (measured:
// docs/performance.md, the code's thresholds); it saves bytes: the
// all-gather brings every descriptor, inline chunk included, through every host's NIC, per_host
// (p - 1) of them. So the tree where those bytes take longer than the extra messages, by the
// simulator's alpha-beta defaults (schedule/simulate.hpp), and never on one host. Every rank
// decides alike: nothing here depends on a call's arguments.
bool rooted_rounds_pay(int p, int hosts, int per_host, size_t descriptor_bytes);

// The most descriptors one round carries to or from one peer.
int largest_round(const Schedule& s);

}  // namespace rdmacoll::schedule
