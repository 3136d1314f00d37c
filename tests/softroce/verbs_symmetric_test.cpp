// Over SoftRoCE (tests/softroce/run-suite.sh): symmetric memory (rdmacoll::empty) across hosts.
// The members cannot map each other's parts there, so each part is its own memory, registered
// with the NIC once when it is made: no call on it registers anything, not even the first,
// with the registration cache on or off.

#include <gtest/gtest.h>

#include <string>

#include "verbs_common.hpp"

namespace rdmacoll {
namespace {

// 2 ranks as hosts of their own, 64 KiB per rank (past the 2 KiB inline limit across hosts:
// one-sided writes into the registered outputs), every element of every call checked. The
// output outlives the process group: its registration goes with the device, and the tensor
// is dropped afterwards without a crash.
void gather_into_symmetric_memory() {
  const int rank = get_rank();
  const int world = get_world_size();
  constexpr int64_t n = 16384;
  Tensor in = empty({n}, DType::Float32);
  Tensor out = empty({world * n}, DType::Float32);
  const uint64_t before = detail::memory_registrations();
  for (int iter = 0; iter < 5; ++iter) {
    testing::fill_input(in, rank, iter);
    all_gather_into_tensor(out, in);
    testing::check_gathered(out, world, iter, DType::Float32);
  }
  RANK_CHECK(detail::memory_registrations() == before,
             "calls on symmetric memory registered " << detail::memory_registrations() - before
                                                     << " times; it was registered when made");
  // Ordinary tensors of the same size: the first call registers them (the counter counts).
  Tensor plain_in = zeros({n}, DType::Float32);
  Tensor plain_out = zeros({world * n}, DType::Float32);
  testing::fill_input(plain_in, rank, 9);
  const uint64_t plain_before = detail::memory_registrations();
  all_gather_into_tensor(plain_out, plain_in);
  testing::check_gathered(plain_out, world, 9, DType::Float32);
  RANK_CHECK(detail::memory_registrations() > plain_before,
             "an ordinary tensor's first call registered nothing");
  destroy_process_group();
  out = Tensor();  // after its group (and the device) went
}

TEST(Verbs, SymmetricMemoryAcrossHostsIsRegisteredOnceWhenMade) {
  for (const char* events : {"yes", "no"}) {  // UCX_MEM_EVENTS=no: the cache is off
    RunOptions opt;
    opt.init = false;
    opt.env = {{"UCX_MEM_EVENTS", events}};
    expect_all_ok(run_ranks(
        2,
        [](int rank, int) {
          init_as_own_host(rank);
          require_verbs();
          gather_into_symmetric_memory();
        },
        opt));
  }
}

}  // namespace
}  // namespace rdmacoll
