// The engine's collectives with every rank a thread of this process, each with its own engine on
// its own endpoint of an in-process fabric (src/transport/loopback): every group size from 1 to
// 16, on one host (descriptors through the mailbox from the group's third call) and spread over
// hosts (log p descriptor rounds, the ring, the two-level schedule), inline and through
// one-sided writes; every element of every rank's output checked. Faults: a rank that rejects
// its arguments, and a rank killed in the middle of a call. Milliseconds, not processes.

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
#include "inprocess_world.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/tensor.hpp"
#include "topology/topology.hpp"
#include "transport/loopback/loopback_transport.hpp"

namespace rdmacoll::engine {
namespace {

using namespace std::chrono_literals;

double value_of(int rank, int64_t i, int call) {
  return static_cast<double>((rank * 131 + i * 7 + call) % 1000);
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// An all-gather of n float32 per rank (in: int64, converted, on odd calls), checked.
void gather_checked(RankContext& c, int64_t n, int call) {
  const bool convert = call % 2 == 1;
  Tensor in = zeros({n}, convert ? DType::Int64 : DType::Float32);
  for (int64_t i = 0; i < n; ++i)
    in.set(i, value_of(c.rank, i, call));
  Tensor out = zeros({c.p * n}, DType::Float32);
  for (int64_t i = 0; i < c.p * n; ++i)
    out.set(i, -1);
  RoundArgs a;
  a.collective = &collectives::kAllGather;
  a.out = out.data();
  a.out_dtype = DType::Float32;
  a.out_numel = out.numel();
  a.in = in.data();
  a.in_dtype = in.dtype();
  a.in_numel = n;
  all_gather(c.engine, c.group, a);
  for (int r = 0; r < c.p; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double got = out.item(r * n + i);
      if (got != value_of(r, i, call)) {
        std::ostringstream os;
        os << "all_gather n=" << n << " call " << call << ": chunk " << r << " element " << i
           << " is " << got << ", expected " << value_of(r, i, call);
        throw std::runtime_error(os.str());
      }
    }
  }
}

TEST(EngineInProcess, AllGatherEveryGroupSizeOnOneHost) {
  for (int p = 1; p <= 16; ++p) {
    run_world(p, hosts_for(p, 0), [](RankContext& c) {
      int call = 0;
      for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{3000}, int64_t{70000}}) {
        for (int k = 0; k < 3; ++k)  // the mailbox takes over from the third call
          gather_checked(c, n, call++);
      }
    });
  }
}

TEST(EngineInProcess, AllGatherEveryGroupSizeAcrossHosts) {
  for (int p = 2; p <= 16; ++p) {
    for (int per_host : {1, 2, 3}) {
      if (per_host >= p) continue;
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        int call = 0;
        // Inline (2 KiB across hosts), the log p schedules, and the ring (1 MiB per rank).
        for (int64_t n : {int64_t{4}, int64_t{1000}, int64_t{1} << 18})
          gather_checked(c, n, call++);
      });
    }
  }
}

TEST(EngineInProcess, AllReduceReduceScatterBroadcastAndBarrier) {
  for (int p : {1, 2, 3, 4, 5, 8, 13}) {
    for (int per_host : {0, 1, 2}) {
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        for (int64_t n : {int64_t{3}, int64_t{1000}, int64_t{70000}}) {
          Tensor t = zeros({n}, DType::Float64);
          for (int64_t i = 0; i < n; ++i)
            t.set(i, value_of(c.rank, i, 0));
          all_reduce(c.engine, c.group, t.data(), DType::Float64, n, ReduceOp::Sum, "");
          for (int64_t i = 0; i < n; ++i) {
            double want = 0;
            for (int r = 0; r < c.p; ++r)
              want += value_of(r, i, 0);
            check(t.item(i) == want,
                  "all_reduce n=" + std::to_string(n) + " element " + std::to_string(i));
          }
          Tensor in = zeros({c.p * n}, DType::Float64);
          for (int64_t i = 0; i < c.p * n; ++i)
            in.set(i, value_of(c.rank, i, 1));
          Tensor out = zeros({n}, DType::Float64);
          reduce_scatter(c.engine, c.group, out.data(), in.data(), DType::Float64, n, ReduceOp::Max,
                         "");
          for (int64_t i = 0; i < n; ++i) {
            double want = -1;
            for (int r = 0; r < c.p; ++r)
              want = std::max(want, value_of(r, c.rank * n + i, 1));
            check(out.item(i) == want,
                  "reduce_scatter n=" + std::to_string(n) + " element " + std::to_string(i));
          }
          const int root = c.p - 1;
          Tensor b = zeros({n}, DType::Int32);
          for (int64_t i = 0; i < n; ++i)
            b.set(i, c.rank == root ? value_of(root, i, 2) : -1);
          broadcast(c.engine, c.group, b.data(), DType::Int32, n, root, "");
          for (int64_t i = 0; i < n; ++i)
            check(b.item(i) == value_of(root, i, 2), "broadcast element " + std::to_string(i));
          barrier(c.engine, c.group);
        }
      });
    }
  }
}

// gather, scatter and reduce to every kind of root, and all_to_all with uneven splits, on one
// host and across hosts (where the eager limit is 2 KiB, so the data paths run early).
TEST(EngineInProcess, GatherScatterReduceAndAllToAll) {
  for (int p : {1, 2, 3, 5, 8, 13}) {
    for (int per_host : {0, 1, 2}) {
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        const int root = c.p / 2;
        for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{1000}, int64_t{70000}}) {
          const std::string at = " n=" + std::to_string(n) + " p=" + std::to_string(c.p);
          Tensor in = zeros({n}, DType::Float64);
          for (int64_t i = 0; i < n; ++i)
            in.set(i, value_of(c.rank, i, 0));
          Tensor all = zeros({c.p * n}, DType::Float64);
          gather(c.engine, c.group, c.rank == root ? all.data() : nullptr, in.data(),
                 DType::Float64, n, root, "");
          for (int r = 0; c.rank == root && r < c.p; ++r)
            for (int64_t i = 0; i < n; ++i)
              check(all.item(r * n + i) == value_of(r, i, 0), "gather" + at);
          Tensor whole = zeros({c.p * n}, DType::Float64);
          for (int64_t i = 0; i < c.p * n; ++i)
            whole.set(i, value_of(root, i, 1));
          Tensor piece = zeros({n}, DType::Float64);
          scatter(c.engine, c.group, piece.data(), c.rank == root ? whole.data() : nullptr,
                  DType::Float64, n, root, "");
          for (int64_t i = 0; i < n; ++i)
            check(piece.item(i) == value_of(root, c.rank * n + i, 1), "scatter" + at);
          reduce(c.engine, c.group, in.data(), DType::Float64, n, ReduceOp::Sum, root, "");
          for (int64_t i = 0; i < n; ++i) {
            double want = 0;
            for (int r = 0; r < c.p; ++r)
              want += value_of(r, i, 0);
            check(in.item(i) == (c.rank == root ? want : value_of(c.rank, i, 0)), "reduce" + at);
          }
          // Rank i sends rank j (i + 2j) % 3 x n / 4 elements (zeros among them).
          auto count = [&](int i, int j) { return int64_t{(i + 2 * j) % 3} * (n / 4); };
          std::vector<int64_t> in_splits(c.p), out_splits(c.p);
          int64_t in_total = 0, out_total = 0;
          for (int j = 0; j < c.p; ++j) {
            in_splits[j] = count(c.rank, j);
            out_splits[j] = count(j, c.rank);
            in_total += in_splits[j];
            out_total += out_splits[j];
          }
          Tensor src = zeros({in_total}, DType::Float64), dst = zeros({out_total}, DType::Float64);
          for (int j = 0, k = 0; j < c.p; ++j)
            for (int64_t e = 0; e < in_splits[j]; ++e, ++k)
              src.set(k, c.rank * 1000000 + j * 1000 + e % 1000);
          all_to_all(c.engine, c.group, dst.data(), src.data(), DType::Float64, out_splits,
                     in_splits, "");
          for (int i = 0, k = 0; i < c.p; ++i)
            for (int64_t e = 0; e < out_splits[i]; ++e, ++k)
              check(dst.item(k) == i * 1000000 + c.rank * 1000 + e % 1000, "all_to_all" + at);
        }
      });
    }
  }
}

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
        gather(c.engine, c.group, c.rank == root ? all.data() : nullptr, in.data(), DType::Float64,
               n, root, "");
        for (int r = 0; c.rank == root && r < c.p; ++r)
          for (int64_t i = 0; i < n; ++i)
            check(all.item(r * n + i) == value_of(r, i, 0), "gather" + at);
        Tensor piece = zeros({n}, DType::Float64);
        scatter(c.engine, c.group, piece.data(), c.rank == root ? all.data() : nullptr,
                DType::Float64, n, root, "");
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
              gather(c.engine, c.group, c.rank == root ? all.data() : nullptr, in.data(),
                     DType::Float32, c.rank == bad ? n + 1 : n, root, "");
              check(false, "no error" + at);
            } catch (const InvalidArgument& e) {
              check(std::string(e.what()).find("ranks disagree") != std::string::npos,
                    "the disagreement is named" + at + ": " + e.what());
            }
            for (int64_t i = 0; i < c.p * (n + 1); ++i)
              check(all.item(i) == -1, "a refused gather wrote" + at);
            // A rank that rejected its own arguments: it raises its own words, the rest its.
            try {
              scatter(c.engine, c.group, in.data(), c.rank == root ? all.data() : nullptr,
                      DType::Float32, n, root, c.rank == bad ? "my own mistake" : "");
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
              reduce(c.engine, c.group, in.data(), DType::Float32, n, ReduceOp::Sum, mine, "");
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

// An all_to_all where rank i sends rank j count(i, j) float64, the value naming (i, j, e);
// checked element by element, and untouched when the call raises InvalidArgument.
template <typename Count>
void all_to_all_checked(RankContext& c, Count count, int call) {
  std::vector<int64_t> in_splits(c.p), out_splits(c.p);
  int64_t in_total = 0, out_total = 0;
  for (int j = 0; j < c.p; ++j) {
    in_splits[j] = count(c.rank, j);
    out_splits[j] = count(j, c.rank);
    in_total += in_splits[j];
    out_total += out_splits[j];
  }
  auto value = [&](int i, int j, int64_t e) { return (i * 1000 + j) * 100 + (e + call) % 100; };
  Tensor src = zeros({in_total}, DType::Float64), dst = zeros({out_total}, DType::Float64);
  for (int j = 0, k = 0; j < c.p; ++j)
    for (int64_t e = 0; e < in_splits[j]; ++e, ++k)
      src.set(k, value(c.rank, j, e));
  for (int64_t k = 0; k < out_total; ++k)
    dst.set(k, -1);
  try {
    all_to_all(c.engine, c.group, dst.data(), src.data(), DType::Float64, out_splits, in_splits,
               "");
  } catch (const InvalidArgument&) {  // then nothing is written, not even our own piece
    for (int64_t k = 0; k < out_total; ++k)
      check(dst.item(k) == -1, "a rejected all_to_all wrote element " + std::to_string(k));
    throw;
  }
  for (int i = 0, k = 0; i < c.p; ++i) {
    for (int64_t e = 0; e < out_splits[i]; ++e, ++k) {
      if (dst.item(k) != value(i, c.rank, e)) {
        throw std::runtime_error("all_to_all call " + std::to_string(call) +
                                 " p=" + std::to_string(c.p) + ": element " + std::to_string(e) +
                                 " from rank " + std::to_string(i) + " is " +
                                 std::to_string(dst.item(k)));
      }
    }
  }
}

// Uneven splits of 130 ranks on 65 hosts take 16 x 130 bytes, more than the 2 KiB a descriptor
// has room for: each pair swaps its sizes in a round of its own. Equal splits travel as two
// numbers at any size. Inline pieces (k = 1) and one-sided writes (k = 8), zeros among them.
TEST(EngineInProcess, AllToAllOfMoreRanksThanTheDescriptorsHoldSplitsFor) {
  const int p = 130;
  run_world(p, hosts_for(p, 2), [](RankContext& c) {
    int call = 0;
    for (int64_t k : {1, 8}) {
      all_to_all_checked(
          c, [k](int i, int j) { return int64_t{(i + 2 * j) % 3} * k; }, call++);
      all_to_all_checked(
          c, [k](int, int) { return k; }, call++);
    }
  });
}

// Equal pieces of up to 2 KiB across hosts from 8 ranks up, whose input is past the 2 KiB
// eager limit, take Bruck's rounds: each rank sends 2 ceil(log2 p) messages a call (the
// descriptors' rounds, then the pieces'), where the pairwise exchange sends ceil(log2 p) +
// p - 1. Smaller inputs ride in the descriptors' rounds alone; larger pieces go pairwise, here
// as one-sided writes (the outputs exceed the eager limit): no messages of their own.
TEST(EngineInProcess, AllToAllOfSmallEqualPiecesAcrossHostsTakesBrucksLogPRounds) {
  for (int p : {8, 9, 13, 16, 33}) {
    for (int per_host : {1, 3}) {
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        int log2p = 0;
        while ((1 << log2p) < c.p)
          ++log2p;
        int call = 0;
        for (int64_t k : {1, 8, 32, 256, 257, 0}) {  // float64: 8 .. 2056 bytes, and none
          const bool fits_inline = c.p * 8 * k + 16 <= 2048;
          const bool bruck = k > 0 && k <= 256 && !fits_inline;
          const uint64_t before = c.group.transport.lock()->statistics().control_messages_sent;
          all_to_all_checked(
              c, [k](int, int) { return k; }, call++);
          const uint64_t sent =
              c.group.transport.lock()->statistics().control_messages_sent - before;
          const uint64_t want = bruck ? 2 * log2p : log2p;
          check(sent == want, "p=" + std::to_string(c.p) + " pieces of " + std::to_string(8 * k) +
                                  " bytes: " + std::to_string(sent) + " messages, expected " +
                                  std::to_string(want));
        }
      });
    }
  }
}

// Beyond the descriptors' room, a pair that disagrees is found by its two ranks, and every rank
// raises their words before anything is written; the group goes on.
TEST(EngineInProcess, AllToAllPairThatDisagreesBeyondTheDescriptorsRoomRaisesOnEveryRank) {
  const int p = 130;
  std::vector<std::string> errors(p);
  run_world(p, hosts_for(p, 2), [&](RankContext& c) {
    // Rank 3 sends rank 70 one element more than rank 70 expects.
    auto count = [&](int i, int j) {
      return int64_t{(i + j) % 4} + (i == 3 && j == 70 && c.rank == 3 ? 1 : 0);
    };
    try {
      all_to_all_checked(c, count, 0);
    } catch (const InvalidArgument& e) {
      errors[c.rank] = e.what();
    }
    all_to_all_checked(
        c, [](int i, int j) { return int64_t{(i * j) % 3}; }, 1);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_NE(errors[r].find("rank 3 sends 2 elements to rank 70, which expects 1"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

// One rank refuses its arguments (what the torch backend's reject() does): every rank raises
// InvalidArgument naming it, nothing is written, and the group's next calls are right.
TEST(EngineInProcess, ARankThatRejectsItsArgumentsMakesEveryRankRaiseAndTheGroupGoesOn) {
  for (int p : {2, 3, 5, 8}) {
    for (int per_host : {0, 1}) {
      run_world(p, hosts_for(p, per_host), [](RankContext& c) {
        for (int64_t n : {int64_t{4}, int64_t{1} << 18}) {
          const int bad = c.p / 2;
          Tensor t = zeros({n}, DType::Float32);
          try {
            if (c.rank == bad) {
              all_reduce(c.engine, c.group, nullptr, DType::Float32, 0, ReduceOp::Sum,
                         "a mistake of this rank's");
            } else {
              all_reduce(c.engine, c.group, t.data(), DType::Float32, n, ReduceOp::Sum, "");
            }
            check(false, "no error");
          } catch (const InvalidArgument& e) {
            check(std::string(e.what()).find("a mistake of this rank's") != std::string::npos,
                  std::string("the reason travels: ") + e.what());
          }
          gather_checked(c, 5, 0);
          gather_checked(c, n, 1);
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
        all_reduce(c.engine, c.group, t.data(), DType::Float32, odd ? 3 : 2, ReduceOp::Sum, "");
      });
      raises("dtype", "torch.float64", [&] {
        all_reduce(c.engine, c.group, t.data(), odd ? DType::Float64 : DType::Float32, 1,
                   ReduceOp::Sum, "");
      });
      raises("operator", "MAX", [&] {
        all_reduce(c.engine, c.group, t.data(), DType::Float32, 2,
                   odd ? ReduceOp::Max : ReduceOp::Sum, "");
      });
      raises("root", "root", [&] {
        broadcast(c.engine, c.group, t.data(), DType::Float32, 2, odd ? 0 : c.p - 1, "");
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
            all_reduce(c.engine, c.group, t.data(), DType::Float32, 2, ReduceOp::Sum, "");
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
