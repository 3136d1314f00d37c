// The engine's exchange and agreement with every rank a thread of this process, each with its
// own engine on its own endpoint of an in-process fabric (src/transport/loopback): rooted
// calls' trees, a root's refusal, disagreements through the mailbox, ranks that call different
// collectives, a rank killed in the middle of a call. Each collective's own loopback tests are
// in its file in tests/integration/ (broadcast_test.cpp, ...). Milliseconds, not processes.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/collectives/all_gather.hpp"
#include "engine/collectives/all_reduce.hpp"
#include "engine/collectives/all_to_all.hpp"
#include "engine/collectives/barrier.hpp"
#include "engine/collectives/broadcast.hpp"
#include "engine/collectives/gather.hpp"
#include "engine/collectives/reduce.hpp"
#include "engine/collectives/reduce_scatter.hpp"
#include "engine/collectives/registry.hpp"
#include "engine/collectives/scatter.hpp"
#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/tensor.hpp"
#include "support/inprocess_world.hpp"
#include "topology/topology.hpp"
#include "transport/loopback/loopback_transport.hpp"

namespace rdmacoll::engine {
namespace {

using namespace std::chrono_literals;

// Across hosts, where many ranks share a host's NIC, a rooted call's descriptors climb a binomial
// tree to the root and its verdict comes back down, after each rank checked its ring
// neighbour's: 2 (p - 1) + p messages a call in all, each descriptor (an inline chunk with it)
// crossing at most log2 p links. Where the tree does not pay (one rank per host, few ranks)
// the descriptors are all-gathered: p ceil(log2 p) messages, every chunk to every rank.
TEST(EngineInProcess, RootedCallsWhereTheTreePaysSendEachDescriptorUpItAndTheVerdictDown) {
  struct Layout {
    int p, per_host;
    bool tree;
  };
  for (const Layout l :
       {Layout{12, 6, true}, Layout{16, 8, true}, Layout{5, 1, false}, Layout{3, 1, false}}) {
    const int p = l.p;
    int levels = 0;
    while ((1 << levels) < p)
      ++levels;
    std::atomic<uint64_t> messages{0};
    int calls = 0;
    run_world(p, hosts_for(p, l.per_host), [&](RankContext& c) {
      const int root = (c.p * 2) / 3;
      int made = 0;
      for (int64_t n : {int64_t{3}, int64_t{1000}}) {
        const std::string at = " n=" + std::to_string(n) + " p=" + std::to_string(c.p);
        Tensor in = zeros({n}, DType::Float64), all = zeros({c.p * n}, DType::Float64);
        for (int64_t i = 0; i < n; ++i)
          in.set(i, value_of(c.rank, i, 0));
        const auto t = c.group.transport.lock();
        const uint64_t before = t->statistics().control_messages_sent;
        gather(c.engine, c.group,
               {.out = c.rank == root ? all.data() : nullptr,
                .in = in.data(),
                .dtype = DType::Float64,
                .n = n,
                .root = root});
        for (int r = 0; c.rank == root && r < c.p; ++r)
          for (int64_t i = 0; i < n; ++i)
            check(all.item(r * n + i) == value_of(r, i, 0), "gather" + at);
        Tensor piece = zeros({n}, DType::Float64);
        scatter(c.engine, c.group,
                {.out = piece.data(),
                 .in = c.rank == root ? all.data() : nullptr,
                 .dtype = DType::Float64,
                 .n = n,
                 .root = root});
        for (int64_t i = 0; i < n; ++i)
          check(piece.item(i) == value_of(c.rank, i, 0), "scatter" + at);
        messages += t->statistics().control_messages_sent - before;
        made += 2;
      }
      if (c.rank == 0) calls = made;
    });
    const uint64_t per_call = l.tree ? 2 * (p - 1) + p : static_cast<uint64_t>(p) * levels;
    EXPECT_EQ(messages.load(), static_cast<uint64_t>(calls) * per_call) << "p " << p;
  }
}

// The root judges a rooted call: every rank raises its words before anything is written (a
// rank that rejected its own arguments raises its own), the group goes on; in the tree, and
// where every rank judges (the all-gather, the mailbox).
TEST(EngineInProcess, ARootedCallTheRootRefusesRaisesTheRootsWordsOnEveryRank) {
  // The tree (12 on 2 hosts), the all-gather in ring-step mode (5 on 5), the mailbox (one host).
  for (const auto& [p, per_host] : {std::pair{12, 6}, std::pair{5, 1}, std::pair{5, 0}}) {
    {
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        const int root = 1;
        for (int bad : {c.p - 1, root}) {
          for (int64_t n : {int64_t{3}, int64_t{5000}}) {
            const std::string at = " bad=" + std::to_string(bad) + " n=" + std::to_string(n);
            Tensor in = zeros({n + 1}, DType::Float32),
                   all = zeros({c.p * (n + 1)}, DType::Float32);
            for (int64_t i = 0; i < c.p * (n + 1); ++i)
              all.set(i, -1);
            // A rank that passes another size: every rank names the disagreement.
            try {
              gather(c.engine, c.group,
                     {.out = c.rank == root ? all.data() : nullptr,
                      .in = in.data(),
                      .dtype = DType::Float32,
                      .n = c.rank == bad ? n + 1 : n,
                      .root = root});
              check(false, "no error" + at);
            } catch (const InvalidArgument& e) {
              check(std::string(e.what()).find("ranks disagree") != std::string::npos,
                    "the disagreement is named" + at + ": " + e.what());
            }
            for (int64_t i = 0; i < c.p * (n + 1); ++i)
              check(all.item(i) == -1, "a refused gather wrote" + at);
            // A rank that rejected its own arguments: it raises its own words, the rest its.
            try {
              scatter(c.engine, c.group,
                      {.out = in.data(),
                       .in = c.rank == root ? all.data() : nullptr,
                       .dtype = DType::Float32,
                       .n = n,
                       .root = root,
                       .local_error = c.rank == bad ? "my own mistake" : ""});
              check(false, "no error" + at);
            } catch (const InvalidArgument& e) {
              const std::string what = e.what();
              check(what.find("my own mistake") != std::string::npos,
                    "the reason travels" + at + ": " + what);
              check((what.find("rejected its arguments") != std::string::npos) == (c.rank != bad),
                    "the rank that rejected raises its own words" + at + ": " + what);
            }
            // Ranks that name different roots (different trees): every rank raises, none waits.
            try {
              const int mine = c.rank == bad ? (root + 1) % c.p : root;
              reduce(c.engine, c.group,
                     {.data = in.data(),
                      .dtype = DType::Float32,
                      .numel = n,
                      .op = ReduceOp::Sum,
                      .root = mine});
              check(false, "no error" + at);
            } catch (const InvalidArgument& e) {
              check(std::string(e.what()).find("root") != std::string::npos,
                    "the roots' disagreement is named" + at + ": " + e.what());
            }
            gather_checked(c, n, 0);  // the group goes on
          }
        }
      });
    }
  }
}

// On one host past the set-up, a small call's descriptor travels as a record in the mailbox's
// flag line (engine/control/mailbox.hpp) and the reader rebuilds the rest from its own group: a
// rank whose sizes, dtype, operator or root differ still makes every rank raise the difference,
// and the group goes on.
TEST(EngineInProcess, SmallCallsThatDisagreeThroughTheMailboxRaiseTheDifferenceOnEveryRank) {
  for (int p : {2, 3, 5}) {
    run_world(p, hosts_for(p, 0), [](RankContext& c) {
      for (int k = 0; k < 3; ++k)  // the mailbox takes over from the third call
        gather_checked(c, 2, k);
      const bool odd = c.rank == c.p - 1;
      auto raises = [&](const char* what, const std::string& words, auto call) {
        try {
          call();
          check(false, std::string(what) + ": no error");
        } catch (const InvalidArgument& e) {
          check(std::string(e.what()).find(words) != std::string::npos,
                std::string(what) + " names the difference: " + e.what());
        }
        gather_checked(c, 3, 1);
      };
      Tensor t = zeros({odd ? 3 : 2}, DType::Float32);
      raises("sizes", "input 3 x torch.float32", [&] {
        all_reduce(
            c.engine, c.group,
            {.data = t.data(), .dtype = DType::Float32, .numel = odd ? 3 : 2, .op = ReduceOp::Sum});
      });
      raises("dtype", "torch.float64", [&] {
        all_reduce(c.engine, c.group,
                   {.data = t.data(),
                    .dtype = odd ? DType::Float64 : DType::Float32,
                    .numel = 1,
                    .op = ReduceOp::Sum});
      });
      raises("operator", "MAX", [&] {
        all_reduce(c.engine, c.group,
                   {.data = t.data(),
                    .dtype = DType::Float32,
                    .numel = 2,
                    .op = odd ? ReduceOp::Max : ReduceOp::Sum});
      });
      raises("root", "root", [&] {
        broadcast(
            c.engine, c.group,
            {.data = t.data(), .dtype = DType::Float32, .numel = 2, .root = odd ? 0 : c.p - 1});
      });
    });
  }
}

// The descriptors carry each call's code from the registry (collectives/registry.hpp): a rank
// that calls another collective makes every rank raise with both calls' names, first through
// the exchange and then through the mailbox.
TEST(EngineInProcess, RanksThatCallDifferentCollectivesRaiseBothNamesOnEveryRank) {
  for (int p : {2, 3, 5}) {
    run_world(p, hosts_for(p, 0), [](RankContext& c) {
      const bool odd = c.rank == c.p - 1;
      for (int k = 0; k < 4; ++k) {  // the mailbox takes over from the third call
        Tensor t = zeros({2}, DType::Float32);
        try {
          if (odd) {
            all_reduce(
                c.engine, c.group,
                {.data = t.data(), .dtype = DType::Float32, .numel = 2, .op = ReduceOp::Sum});
          } else {
            gather_checked(c, 2, 0);
          }
          check(false, "no error");
        } catch (const InvalidArgument& e) {
          const std::string want =
              "rank 0 all_gather_into_tensor, rank " + std::to_string(c.p - 1) + " all_reduce";
          check(std::string(e.what()).find(want) != std::string::npos,
                "names both calls (" + want + "): " + e.what());
        }
        gather_checked(c, 3, k);
      }
    });
  }
}

// A rank killed while the others wait for it: they raise PeerFailure, not Timeout, at once.
TEST(EngineInProcess, AKilledRankMakesTheOthersRaisePeerFailure) {
  for (int p : {2, 4, 7}) {
    std::atomic<int> raised{0};
    run_world(p, hosts_for(p, 1), [&](RankContext& c) {
      // Call #0 is over everywhere once the doomed rank has finished call #1 (every rank's
      // descriptor of call #1 reached it); it dies then, while the others may be in call #1.
      gather_checked(c, 100, 0);
      if (c.rank == c.p - 1) {
        gather_checked(c, 100, 1);
        c.fabric.kill(c.rank);
        return;
      }
      const auto start = std::chrono::steady_clock::now();
      try {
        gather_checked(c, 100, 1);
        gather_checked(c, 1000, 2);
        check(false, "no error after a rank was killed");
      } catch (const PeerFailure&) {
        check(std::chrono::steady_clock::now() - start < 10s, "raised at once");
        ++raised;
        // Those waiting for this rank (not for the dead one) learn of it as it leaves.
        c.fabric.kill(c.rank);
      }
    });
    EXPECT_EQ(raised.load(), p - 1);
  }
}

}  // namespace
}  // namespace rdmacoll::engine
