// Ring all-gathers across hosts (every rank its own host on this machine): the ring step's
// descriptors and the errors spread along the ring (tests/integration/ring_calls.hpp).

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ring_calls.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::run_ranks;
using testing::RunOptions;

constexpr int64_t kRingNumel = (1 << 20) / 4;  // 1 MiB per rank: the selector's ring

void init_as_own_host(int rank) {
  ::setenv("RDMACOLL_HOST_ID", ("host" + std::to_string(rank)).c_str(), 1);
  init_process_group();
}

RunOptions own_hosts() {
  RunOptions opt;
  opt.init = false;
  return opt;
}

TEST(RingCalls, TalkToTheTwoRingNeighboursOnly) {
  expect_all_ok(run_ranks(
      5,
      [](int rank, int) {
        init_as_own_host(rank);
        testing::ring_calls_talk_to_two_neighbours(kRingNumel);
        testing::ring_reduce_scatters_talk_to_two_neighbours(4096);
        destroy_process_group();
      },
      own_hosts()));
}

TEST(RingCalls, DisagreementsRaiseOnEveryRankAndTheGroupGoesOn) {
  expect_all_ok(run_ranks(
      5,
      [](int rank, int world) {
        init_as_own_host(rank);
        testing::ring_disagreements_raise_everywhere(rank, world, kRingNumel);
        destroy_process_group();
      },
      own_hosts()));
}

}  // namespace
}  // namespace rdmacoll
