#include "bootstrap/member_group.hpp"

#include <algorithm>
#include <cstdlib>

#include "common/ranks.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

MemberGroup meet_member_group(Store& group_store, Store& world_store, int group_rank,
                              int group_size, int world_rank, int world_size, MemberGroupIds ids,
                              std::chrono::milliseconds wait, const std::string& where) {
  const std::string claim = "rdmacoll/member/" + std::to_string(group_rank);
  if (group_store.add("rdmacoll/claims/" + std::to_string(group_rank), 1) > 1) {
    const std::string other = group_store.check(claim) ? group_store.get_string(claim, wait) : "?";
    throw InvalidArgument(where + ": group rank " + std::to_string(group_rank) +
                          " is already claimed by world rank " + other +
                          "; every member must pass its own group rank");
  }
  group_store.set(claim, std::to_string(world_rank));
  if (group_rank == 0) {
    const int64_t n = world_store.add("rdmacoll/member_groups", 1);
    group_store.set("rdmacoll/group_id", std::to_string(ids.first + (n - 1) % ids.count));
  }
  MemberGroup out;
  out.members.resize(group_size);
  for (int r = 0; r < group_size; ++r) {
    const std::string v = group_store.get_string("rdmacoll/member/" + std::to_string(r), wait);
    char* end = nullptr;
    const long m = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || m < 0 || m >= world_size) {
      throw InvalidArgument(where + ": group rank " + std::to_string(r) +
                            " published world rank '" + v + "', not one of [0, " +
                            std::to_string(world_size) + ")");
    }
    out.members[r] = static_cast<int>(m);
  }
  if (out.members[group_rank] != world_rank) {
    throw InvalidArgument(where + ": group rank " + std::to_string(group_rank) +
                          " is claimed by world rank " + std::to_string(out.members[group_rank]) +
                          " too; every member must pass its own group rank");
  }
  std::vector<int> sorted = out.members;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw InvalidArgument(where + ": world ranks " + join_ranks(out.members) +
                          " contain a duplicate; does every member use its own world rank?");
  }
  const std::string id_text = group_store.get_string("rdmacoll/group_id", wait);
  const long id = std::strtol(id_text.c_str(), nullptr, 10);
  if (id < ids.first || id >= ids.first + ids.count) {
    throw InvalidArgument(where + ": the group id '" + id_text + "' in the store is not one of " +
                          "rdmacoll's");
  }
  out.id = static_cast<uint32_t>(id);
  return out;
}

}  // namespace rdmacoll::bootstrap
