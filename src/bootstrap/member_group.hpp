#pragma once
// How the members of a group made without the rest of the world (new_member_group) meet through
// a store of their own: each member claims its group rank and says which world rank it is; the
// first member draws the group's id from a counter in the world's store, so ids are unique in
// the job whatever groups other ranks make. Every mistake (a rank claimed twice, a world rank
// out of range or twice, an id not ours) is an InvalidArgument prefixed with `where`.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rdmacoll/store.hpp"

namespace rdmacoll::bootstrap {

struct MemberGroupIds {
  long first;  // the id range member groups draw from, wrapping around
  long count;
};

struct MemberGroup {
  std::vector<int> members;  // world rank of each group rank
  uint32_t id = 0;
};

MemberGroup meet_member_group(Store& group_store, Store& world_store, int group_rank,
                              int group_size, int world_rank, int world_size, MemberGroupIds ids,
                              std::chrono::milliseconds wait, const std::string& where);

}  // namespace rdmacoll::bootstrap
