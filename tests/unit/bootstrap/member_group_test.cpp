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

// The mistakes a member or a hostile store can make each say what is wrong.
TEST(MemberGroupMeeting, AGroupRankClaimedTwiceAWorldRankOutOfRangeOrAForeignIdIsRefused) {
  {
    testing::MemoryStore world, group;
    meet_member_group(group, world, 0, 1, 3, 4, kIds, milliseconds(1000), "first");
    try {
      meet_member_group(group, world, 0, 1, 2, 4, kIds, milliseconds(1000), "second");
      FAIL() << "a claimed group rank was taken again";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("second: group rank 0 is already claimed by world "
                                           "rank 3"),
                std::string::npos)
          << e.what();
    }
  }
  {
    testing::MemoryStore world, group;
    group.set("rdmacoll/member/1", std::string("99"));
    try {
      meet_member_group(group, world, 0, 2, 0, 4, kIds, milliseconds(1000), "w");
      FAIL() << "a world rank out of range was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("group rank 1 published world rank '99'"),
                std::string::npos)
          << e.what();
    }
  }
  {
    testing::MemoryStore world, group;
    group.set("rdmacoll/member/1", std::string("0"));
    try {
      meet_member_group(group, world, 0, 2, 0, 4, kIds, milliseconds(1000), "w");
      FAIL() << "a duplicate world rank was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("contain a duplicate"), std::string::npos) << e.what();
    }
  }
  {
    testing::MemoryStore world, group;
    group.set("rdmacoll/member/0", std::string("1"));
    group.set("rdmacoll/group_id", std::string("5"));
    try {
      meet_member_group(group, world, 1, 2, 2, 4, kIds, milliseconds(1000), "w");
      FAIL() << "a foreign id was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("the group id '5'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace rdmacoll::bootstrap
