// Process groups over a store the caller hands in, and groups created by their members alone,
// as the torch backend uses them. The store here is the caller's own: our TCP store behind a
// key prefix (as torch's PrefixStore), hosted by rank 0 of the test. Real processes over UCX.

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>

#include "bootstrap/prefixed_store.hpp"
#include "bootstrap/store.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;
using namespace std::chrono_literals;

// Every key under a prefix of another store, as torch's PrefixStore.
using PrefixStore = bootstrap::PrefixedStore;

// The job's store, made by the caller: rank 0 hosts a server on the test's port.
struct CallersStore {
  std::unique_ptr<bootstrap::StoreServer> server;
  std::shared_ptr<Store> store;
};
CallersStore make_store(int rank) {
  CallersStore s;
  const int port = std::atoi(std::getenv("MASTER_PORT"));
  if (rank == 0) s.server = std::make_unique<bootstrap::StoreServer>("127.0.0.1", port);
  s.store = std::make_shared<PrefixStore>(
      "job/",
      std::make_shared<bootstrap::StoreClient>("127.0.0.1", port, bootstrap::Clock::now() + 60s));
  return s;
}

// init_process_group over the caller's store.
void init_over(const CallersStore& s, int rank, int world) {
  InitOptions o;
  o.store = s.store;
  o.rank = rank;
  o.world_size = world;
  init_process_group(o);
}

testing::RunOptions without_init() {
  testing::RunOptions opt;
  opt.init = false;
  return opt;
}

TEST(StoreGroups, WorldAndMemberGroupsOverTheCallersStore) {
  expect_all_ok(run_ranks(
      4,
      [](int rank, int world) {
        CallersStore s = make_store(rank);
        init_over(s, rank, world);
        testing::gather_and_check({}, 100, DType::Float32, DType::Float32, false);
        // Members only: {1, 3} and {0, 1, 2}, each over its own prefix of the store.
        Group pair, three;
        if (rank == 1 || rank == 3)
          pair = new_member_group(std::make_shared<PrefixStore>("pair/", s.store), rank / 2, 2);
        if (rank < 3)
          three = new_member_group(std::make_shared<PrefixStore>("three/", s.store), rank, 3);
        using namespace testing::reduction;
        for (int iter = 0; iter < 20; ++iter) {
          if (rank == 1 || rank == 3) {
            RANK_CHECK(pair.size() == 2 && pair.ranks()[pair.rank()] == rank, "pair membership");
            reduce_scatter_and_check(pair, 1000, DType::Float32, ReduceOp::Sum, iter, Layout::Flat);
          }
          if (rank < 3) broadcast_and_check(three, 2, 20000, DType::Int32, iter);
          testing::gather_and_check({}, 7, DType::Int64, DType::Int64, true, iter);
        }
        destroy_process_group();
      },
      without_init()));
}

// Many member groups share the one transport: making 300 of them and using each costs no
// connections, only its own small state.
TEST(StoreGroups, ManyMemberGroupsShareTheTransport) {
  expect_all_ok(run_ranks(
      3,
      [](int rank, int world) {
        CallersStore s = make_store(rank);
        init_over(s, rank, world);
        for (int i = 0; i < 300; ++i) {
          Group g =
              new_member_group(std::make_shared<PrefixStore>(
                                   std::string("g").append(std::to_string(i)).append("/"), s.store),
                               rank, world);
          Tensor t = zeros({3});
          t.set(0, rank + i);
          all_reduce(t, ReduceOp::Sum, g);
          RANK_CHECK(t.item(0) == 3 * i + 3, "group " << i << ": got " << t.item(0));
        }
        destroy_process_group();
      },
      without_init()));
}

// Two processes claiming one group rank: the second claim raises at once, naming the first;
// the first claimant times out waiting for the member nobody is.
TEST(StoreGroups, ConflictingGroupRanksRaise) {
  expect_all_ok(run_ranks(
      2,
      [](int rank, int world) {
        CallersStore s = make_store(rank);
        init_over(s, rank, world);
        auto gs = std::make_shared<PrefixStore>("bad/", s.store);
        if (rank == 0) {
          expect_throw_with<Timeout>([&] { new_member_group(gs, 0, 2, 2s); }, "rdmacoll/member/1");
        } else {
          gs->get("rdmacoll/group_id", 60s);  // rank 0 has claimed group rank 0
          expect_throw_with<InvalidArgument>([&] { new_member_group(gs, 0, 2, 2s); },
                                             "group rank 0 is already claimed by world rank 0");
        }
        expect_throw_with<InvalidArgument>([&] { new_member_group(gs, 2, 2); },
                                           "group rank 2 of size 2 is impossible");
        barrier();
        destroy_process_group();
      },
      without_init()));
}

// Under mpirun (RDMACOLL_TEST_LAUNCHED) the world met through PMIx, and on UCX, which connects
// every peer from the addresses exchanged at init, it opened no store at all: a member group,
// whose id comes from the world's store, says to use new_group, on every rank.
TEST(StoreGroups, AWorldMetThroughPmixOnUcxHasNoStoreAndAMemberGroupSaysSo) {
  if (!testing::launched()) GTEST_SKIP() << "runs under a PMIx launcher only";
  expect_all_ok(run_ranks(2, [](int rank, int) {
    // Any store will do: it is refused before it is used.
    auto caller = std::make_shared<bootstrap::PrefixedStore>("unused/", nullptr);
    expect_throw_with<InvalidArgument>([&] { new_member_group(caller, rank, 2); },
                                       "launcher's PMIx server");
    Tensor in = tensor({rank + 1.0}), out = zeros({2});
    all_gather_into_tensor(out, in);  // the world is fine
    RANK_CHECK(out.item(0) == 1 && out.item(1) == 2, "got " << out);
  }));
}

}  // namespace
}  // namespace rdmacoll
