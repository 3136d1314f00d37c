#pragma once
// The control plane as schedules. A call's descriptors are all-gathered, each rank's chunk its
// serialized descriptor, on the same plain-data schedules as the data: the peers a call talks to
// and the order of its rounds are the data schedules' (proven in tests/unit/schedule_test.cpp),
// and the connection plan takes them from here.
//
//  - Direct: one round, every member to every member (one host, where the messages are copies
//    through shared memory, or the mailbox replaces them).
//  - Bruck, in the group's ring order: ceil(log2 p) rounds for any p.
//  - RecursiveDoubling, in the group's virtual order (p a power of two): a rank talks only to
//    the recursive-doubling all-gather's own peers.
//  - RingStep: Bruck's first round, to the ring predecessor and from the successor, which is all
//    a ring call needs (it writes to its successor only).

#include <vector>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

enum class ServiceRounds { Direct, Bruck, RecursiveDoubling, RingStep };

// The descriptor all-gather of group rank `rank`; `order` is the ring order for Bruck and the
// ring step, the virtual order for recursive doubling (ignored by Direct).
Schedule descriptor_schedule(ServiceRounds rounds, const std::vector<int>& order, int rank);

// The most descriptors one round carries to or from one peer.
int largest_round(const Schedule& s);

}  // namespace rdmacoll::schedule
