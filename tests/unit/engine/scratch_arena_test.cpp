// A group's scratch arena (src/engine/core/scratch_arena.hpp): each owner's struct made once and
// handed back unchanged to every later call, apart from every other owner's.

#include "engine/core/scratch_arena.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace rdmacoll::engine {
namespace {

struct OwnerA {
  std::vector<int> kept;
};
struct OwnerB {
  int calls = 0;
};

TEST(ScratchArena, EachOwnerGetsItsOwnStructAndTheSameOneOnEveryLaterCall) {
  ScratchArena arena;
  EXPECT_EQ(arena.find<OwnerA>(), nullptr) << "nothing is made before its owner asks";
  OwnerA& a = arena.get<OwnerA>();
  a.kept.assign(1000, 7);
  const int* buffer = a.kept.data();
  ++arena.get<OwnerB>().calls;
  ++arena.get<OwnerB>().calls;
  EXPECT_EQ(&arena.get<OwnerA>(), &a);
  EXPECT_EQ(arena.get<OwnerA>().kept.data(), buffer) << "a later call reuses the buffer";
  EXPECT_EQ(arena.get<OwnerB>().calls, 2);
  EXPECT_EQ(arena.find<OwnerB>(), &arena.get<OwnerB>());
  EXPECT_NE(static_cast<const void*>(&arena.get<OwnerA>()),
            static_cast<const void*>(&arena.get<OwnerB>()));
}

TEST(ScratchArena, TwoGroupsKeepSeparateStructs) {
  ScratchArena one, two;
  one.get<OwnerB>().calls = 5;
  EXPECT_EQ(two.get<OwnerB>().calls, 0);
}

}  // namespace
}  // namespace rdmacoll::engine
