#pragma once
// What every rank knows about one group (the world or a new_group): members, this rank's place,
// the per-call sequence number and cached schedules. Internal: the public Group holds a pointer.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "schedule/schedule.hpp"

namespace rdmacoll {

class GroupState {
 public:
  uint32_t id = 0;              // 0 is the world; new_group() numbers the rest in call order
  std::vector<int> members;     // global ranks, in group rank order
  int rank = -1;                // this process's group rank, -1 for a non-member
  std::vector<int> order;       // virtual order for rd/bruck: host index in the low bits
  std::vector<int> ring_order;  // ring order: each host's ranks contiguous
  int hosts = 1;                // hosts the group spans
  std::chrono::milliseconds timeout{0};
  uint64_t next_seq = 0;              // calls so far; the same on every member
  std::optional<std::string> broken;  // set after a failure that left ranks out of step
  std::map<schedule::Algorithm, schedule::Schedule> schedules;
  std::vector<std::vector<uint8_t>> descriptor_buffers;  // one per member, reused every call

  int size() const { return static_cast<int>(members.size()); }
  bool is_member() const { return rank >= 0; }
  std::string describe() const;  // "group 1 (ranks [0, 1])"
};

}  // namespace rdmacoll
