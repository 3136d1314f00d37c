// new_member_group's meeting (bootstrap/member_group.hpp) over an in-process store: members in
// threads, as separate processes would meet through their own store.
#include "bootstrap/member_group.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "rdmacoll/errors.hpp"
#include "support/memory_store.hpp"

namespace rdmacoll::bootstrap {
namespace {

using std::chrono::milliseconds;
constexpr MemberGroupIds kIds{8192, 8192};

// Every member learns the same world ranks, in group-rank order, and the same id from the
// world's counter; a second group made later draws the next id.
TEST(MemberGroupMeeting, EveryMemberLearnsTheSameMembersAndTheNextIdOfTheWorld) {
  testing::MemoryStore world;
  const std::vector<int> world_ranks = {5, 2, 7};
  for (int made = 0; made < 2; ++made) {
    testing::MemoryStore group;
    std::vector<MemberGroup> met(world_ranks.size());
    std::vector<std::thread> members;
    for (int r = 0; r < 3; ++r) {
      members.emplace_back([&, r] {
        met[r] = meet_member_group(group, world, r, 3, world_ranks[r], 8, kIds, milliseconds(5000),
                                   "test");
      });
    }
    for (auto& t : members)
      t.join();
    for (const MemberGroup& m : met) {
      EXPECT_EQ(m.members, world_ranks);
      EXPECT_EQ(m.id, 8192u + made);
    }
  }
}

// The counter wraps inside the id range.
TEST(MemberGroupMeeting, IdsWrapAroundInsideTheirRange) {
  testing::MemoryStore world;
  world.add("rdmacoll/member_groups", 8192);
  testing::MemoryStore group;
  EXPECT_EQ(meet_member_group(group, world, 0, 1, 3, 4, kIds, milliseconds(1000), "t").id, 8192u);
}

// A meeting of group rank `group_rank` (world rank `world_rank`, world of 4) that must be
// refused with a message containing `needle`.
void expect_refused(testing::MemoryStore& group, int group_rank, int group_size, int world_rank,
                    const std::string& needle) {
  testing::MemoryStore world;
  try {
    meet_member_group(group, world, group_rank, group_size, world_rank, 4, kIds, milliseconds(1000),
                      "second");
    ADD_FAILURE() << "taken; expected a refusal mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The mistakes a member or a hostile store can make each say what is wrong.
TEST(MemberGroupMeeting, AGroupRankClaimedTwiceAWorldRankOutOfRangeOrAForeignIdIsRefused) {
  {
    testing::MemoryStore world, group;
    meet_member_group(group, world, 0, 1, 3, 4, kIds, milliseconds(1000), "first");
    expect_refused(group, 0, 1, 2, "second: group rank 0 is already claimed by world rank 3");
  }
  {
    testing::MemoryStore group;
    group.set("rdmacoll/member/1", std::string("99"));
    expect_refused(group, 0, 2, 0, "group rank 1 published world rank '99'");
  }
  {
    testing::MemoryStore group;
    group.set("rdmacoll/member/1", std::string("0"));
    expect_refused(group, 0, 2, 0, "contain a duplicate");
  }
  {
    testing::MemoryStore group;
    group.set("rdmacoll/member/0", std::string("1"));
    group.set("rdmacoll/group_id", std::string("5"));
    expect_refused(group, 1, 2, 2, "the group id '5'");
  }
}

}  // namespace
}  // namespace rdmacoll::bootstrap
