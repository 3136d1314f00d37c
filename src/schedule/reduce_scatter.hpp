#pragma once
// Reduce-scatter schedules as plain data, in the all-gather's Schedule type: a Transfer's
// `first` is the piece whose partial sum moves (count 1). A rank folds each received partial
// sum with its own copy of the piece before it sends that piece on (ring) or keeps it (its own
// piece). Executing them is src/engine/collectives/reduce_scatter.cpp's job.
//  - direct: one step; every rank writes piece j to rank j. Fewest steps; across hosts it
//    sends k (p - k) pieces off each host of k ranks.
//  - ring (host-major order): p - 1 steps; at step s the rank at ring position v sends its
//    partial sum of the piece owned by position v - s - 1 to position v + 1 and receives that
//    of position v - s - 2. The ring crosses each host boundary once: p - 1 pieces off each
//    host, within k - 1 of the minimum p - k.

#include <vector>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

Schedule direct_reduce_scatter(int p, int rank);
Schedule ring_reduce_scatter(const std::vector<int>& order, int rank);

}  // namespace rdmacoll::schedule
