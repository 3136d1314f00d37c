// The plan of Rendezvous::all_gather's exchange through the store, run for every world size up
// to 300 against a simulated store whose reads wait for their key: no rank ever waits forever,
// every rank ends with every rank's value in rank order, and each makes O(sqrt p) requests.
#include "bootstrap/store_gather.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/rendezvous.hpp"
#include "rdmacoll/errors.hpp"
#include "support/memory_store.hpp"

namespace rdmacoll::bootstrap {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes value_of(int rank) {
  // Lengths differ (0 included) so a block's framing is exercised.
  Bytes b(static_cast<size_t>(rank % 5));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<uint8_t>(rank * 7 + i);
  return b;
}

struct Outcome {
  std::vector<std::vector<Bytes>> got;  // by rank, every rank's value
  std::vector<int> requests;            // by rank
};

// Runs every rank's steps round-robin; a read whose key is not there yet waits (the rank makes
// no progress this turn). Fails the test if a turn moves no rank while some are unfinished.
Outcome simulate(int p) {
  const StoreGather plan(p);
  std::map<std::string, Bytes> store;
  std::vector<std::vector<StoreGather::Step>> steps(p);
  std::vector<size_t> next(p, 0);
  Outcome o{std::vector<std::vector<Bytes>>(p, std::vector<Bytes>(p)), std::vector<int>(p, 0)};
  for (int r = 0; r < p; ++r) {
    steps[r] = plan.steps(r);
    o.got[r][r] = value_of(r);
  }
  for (int unfinished = p; unfinished > 0;) {
    bool moved = false;
    unfinished = 0;
    for (int r = 0; r < p; ++r) {
      while (next[r] < steps[r].size()) {
        const auto s = steps[r][next[r]];
        using K = StoreGather::Step::Kind;
        std::string key = std::to_string(s.index);
        key.insert(key.begin(), s.kind == K::PostValue || s.kind == K::ReadValue ? 'v' : 'b');
        if (s.kind == K::PostValue) {
          EXPECT_EQ(s.index, r);
          store[key] = value_of(r);
        } else if (s.kind == K::PostBlock) {
          store[key] = encode_block(o.got[r], plan.first_of(s.index), plan.end_of(s.index));
        } else {
          const auto it = store.find(key);
          if (it == store.end()) break;  // waits
          if (s.kind == K::ReadValue) {
            o.got[r][s.index] = it->second;
          } else {
            EXPECT_TRUE(
                decode_block(it->second, o.got[r], plan.first_of(s.index), plan.end_of(s.index)))
                << "p " << p << " block " << s.index;
          }
        }
        ++o.requests[r];
        ++next[r];
        moved = true;
      }
      if (next[r] < steps[r].size()) ++unfinished;
    }
    if (unfinished > 0 && !moved) {
      ADD_FAILURE() << "p " << p << ": " << unfinished << " ranks wait forever";
      break;
    }
  }
  return o;
}

int sqrt_ceil(int p) {
  int s = 1;
  while (s * s < p)
    ++s;
  return s;
}

TEST(StoreGather, EveryRankGetsEveryValueInOrderForEveryWorldSizeUpTo300) {
  for (int p = 1; p <= 300; ++p) {
    const Outcome o = simulate(p);
    for (int r = 0; r < p; ++r) {
      for (int q = 0; q < p; ++q)
        ASSERT_EQ(o.got[r][q], value_of(q)) << "p " << p << ": rank " << r << " has rank " << q;
    }
  }
}

TEST(StoreGather, EachRankMakesAboutTwoSqrtPRequestsNotP) {
  for (int p : {1, 2, 3, 8, 63, 64, 65, 300, 1024, 4096}) {
    const StoreGather plan(p);
    int most = 0;
    long total = 0;
    for (int r = 0; r < p; ++r) {
      const int n = static_cast<int>(plan.steps(r).size());
      most = std::max(most, n);
      total += n;
    }
    EXPECT_LE(most, 2 * sqrt_ceil(p) + 1) << "p " << p;
    // p reads each would be p^2 in all.
    EXPECT_LE(total, static_cast<long>(p) * (sqrt_ceil(p) + 3)) << "p " << p;
  }
  // The figures in docs/design.md (the rendezvous).
  EXPECT_EQ(StoreGather(1024).steps(0).size(), 1u + 31 + 1 + 31);
  EXPECT_EQ(StoreGather(1024).steps(1).size(), 1u + 32);
  EXPECT_EQ(StoreGather(4096).steps(0).size(), 1u + 63 + 1 + 63);
  EXPECT_EQ(StoreGather(4096).steps(1).size(), 1u + 64);
}

TEST(StoreGather, ABlockThatIsNotWellFormedIsRefusedAndLeavesTheValuesAlone) {
  std::vector<Bytes> values{{1, 2}, {}, {3}};
  const Bytes good = encode_block(values, 0, 3);
  std::vector<Bytes> out(3, Bytes{9});
  ASSERT_TRUE(decode_block(good, out, 0, 3));
  EXPECT_EQ(out, values);
  for (size_t cut = 0; cut < good.size(); ++cut) {
    std::vector<Bytes> untouched(3, Bytes{9});
    EXPECT_FALSE(decode_block(Bytes(good.begin(), good.begin() + static_cast<ptrdiff_t>(cut)),
                              untouched, 0, 3))
        << "cut at " << cut;
    EXPECT_EQ(untouched, std::vector<Bytes>(3, Bytes{9}));
  }
  Bytes longer = good;
  longer.push_back(0);
  EXPECT_FALSE(decode_block(longer, out, 0, 3));
  Bytes huge = good;
  huge[7] = 0xff;  // the first length's top byte: far past the end
  EXPECT_FALSE(decode_block(huge, out, 0, 3));
}

using testing::MemoryStore;

// The rendezvous itself, 130 ranks as threads over one store: every rank gets every value, and
// makes the plan's requests for it, not 131.
TEST(StoreGather, TheRendezvousFollowsThePlanOverARealStore) {
  constexpr int p = 130;
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::vector<Bytes>> got(p);
  std::vector<int> requests(p, 0);
  std::vector<std::string> errors(p);
  std::vector<std::thread> ranks;
  for (int r = 0; r < p; ++r) {
    ranks.emplace_back([&, r] {
      try {
        RendezvousOptions o;
        o.rank = r;
        o.world_size = p;
        o.timeout = std::chrono::seconds(60);
        o.store = store;
        o.where = "test (rank " + std::to_string(r) + ")";
        Rendezvous rv(o);
        const int before = MemoryStore::requests;
        got[r] = rv.all_gather("test/", value_of(r));
        requests[r] = MemoryStore::requests - before;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks)
    t.join();
  const StoreGather plan(p);
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(got[r].size(), static_cast<size_t>(p));
    for (int q = 0; q < p; ++q)
      ASSERT_EQ(got[r][q], value_of(q)) << "rank " << r << " has rank " << q;
    // A read that waits past a slice of the rendezvous's wait asks again; none waits that long
    // here unless the machine stalls, so allow a few.
    EXPECT_GE(requests[r], static_cast<int>(plan.steps(r).size())) << "rank " << r;
    EXPECT_LE(requests[r], static_cast<int>(plan.steps(r).size()) + 8) << "rank " << r;
  }
}

// Rank 2 never comes; when the timeout ends the others' waits the store is gone (rank 0 gave up
// and took it down): each names only the ranks whose values it has not got, not every other.
TEST(StoreGather, ARankThatCannotAskTheStoreNamesOnlyTheRanksItHasNotHeardFrom) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      RendezvousOptions o;
      o.rank = r;
      o.world_size = 3;
      o.timeout = std::chrono::milliseconds(1500);
      o.store = store;
      o.where = "test (rank " + std::to_string(r) + ")";
      try {
        Rendezvous rv(o);
        rv.all_gather("test/", value_of(r));
      } catch (const Timeout& e) {
        errors[r] = e.what();
      } catch (const std::exception& e) {
        errors[r] = std::string("not a timeout: ") + e.what();
      }
    });
  }
  store->go_away_for_checks_on("/test/");
  for (auto& t : ranks)
    t.join();
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("ranks [2] were not heard from"), std::string::npos) << errors[r];
}

}  // namespace
}  // namespace rdmacoll::bootstrap
