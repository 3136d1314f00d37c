// Async work and several threads: collectives issued with async_op = true, waited for later;
// collectives from two threads on two groups at once; a rank killed with work outstanding.
// Real processes over UCX (shared memory, and again with UCX_TLS=tcp). Every result checked.

#include <gtest/gtest.h>

#include <signal.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "gather_check.hpp"
#include "reduce_check.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::run_ranks;

// Rank r's tensor for call `iter`: element i is r + i + iter.
Tensor filled(int64_t n, int rank, int iter, DType dt = DType::Float32) {
  Tensor t = zeros({n}, dt);
  for (int64_t i = 0; i < n; ++i)
    t.set(i, rank + i + iter);
  return t;
}

// The sum over p ranks of filled(n, r, iter)[i].
double summed(int p, int64_t i, int iter) {
  return p * (i + iter) + p * (p - 1) / 2.0;
}

void check_summed(const Tensor& t, int p, int iter, const char* what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    RANK_CHECK(t.item(i) == summed(p, i, iter),
               what << " iter " << iter << " element " << i << ": got " << t.item(i));
  }
}

void check_gathered_filled(const Tensor& out, int p, int iter, const char* what) {
  const int64_t n = out.numel() / p;
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      RANK_CHECK(out.item(r * n + i) == r + i + iter,
                 what << " iter " << iter << " chunk " << r << " element " << i);
    }
  }
}

TEST(Async, EveryCollectiveOutstandingAtOnceCompletesInIssueOrder) {
  expect_all_ok(run_ranks(3, [](int rank, int p) {
    for (int64_t n : {int64_t{5}, int64_t{70000}}) {  // eager, and past it (the data path)
      // The same tensor is reduced, then gathered from, then reduced again: issue order shows.
      Tensor t = filled(n, rank, 0);
      Tensor gathered = zeros({p * n});
      Tensor bcast = rank == 1 ? filled(n, 1, 7) : zeros({n});
      Tensor rs_in = filled(p * n, rank, 3), rs_out = zeros({n});
      std::vector<Work> works;
      works.push_back(all_reduce(t, ReduceOp::Sum, {}, true));
      works.push_back(all_gather_into_tensor(gathered, t, {}, true));
      works.push_back(broadcast(bcast, 1, {}, true));
      works.push_back(reduce_scatter_tensor(rs_out, rs_in, ReduceOp::Sum, {}, true));
      works.push_back(barrier({}, true));
      works.push_back(all_reduce(t, ReduceOp::Max, {}, true));
      for (Work& w : works) {
        RANK_CHECK(w.wait(), "wait returns true");
        RANK_CHECK(w.is_completed() && !w.exception(), "completed without error");
      }
      for (int64_t i = 0; i < n; ++i) {
        // Every rank gathered the same summed tensor; Max of equal tensors is the tensor.
        RANK_CHECK(t.item(i) == summed(p, i, 0), "all_reduce element " << i);
        for (int r = 0; r < p; ++r)
          RANK_CHECK(gathered.item(r * n + i) == summed(p, i, 0), "gathered " << r << "," << i);
        RANK_CHECK(bcast.item(i) == 1 + i + 7, "broadcast element " << i);
        RANK_CHECK(rs_out.item(i) == p * (rank * n + i + 3) + p * (p - 1) / 2.0,
                   "reduce_scatter element " << i);
      }
      // A blocking call after async ones runs behind them.
      Tensor u = filled(n, rank, 4);
      Work pending = all_reduce(u, ReduceOp::Sum, {}, true);
      Tensor v = filled(n, rank, 5);
      all_reduce(v);
      RANK_CHECK(pending.is_completed(), "the earlier async call finished first");
      check_summed(u, p, 4, "async before blocking");
      check_summed(v, p, 5, "blocking after async");
    }
  }));
}

TEST(Async, ErrorsAreRethrownByWaitOnEveryRank) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    Tensor ints = zeros({4}, DType::Int32);
    Work w = all_reduce(ints, ReduceOp::Avg, {}, true);
    expect_throw_with<InvalidArgument>([&] { w.wait(); }, "AVG needs a floating-point dtype");
    RANK_CHECK(w.is_completed() && w.exception(), "failed work reports its exception");
    Tensor a = zeros({rank == 0 ? 4 : 5});
    Work bad = broadcast(a, 0, {}, true);
    expect_throw_with<InvalidArgument>([&] { bad.wait(); }, "disagree");
    Tensor ok = filled(3, rank, 1);
    all_reduce(ok, ReduceOp::Sum, {}, true).wait();
    check_summed(ok, 2, 1, "after errors");
  }));
}

// Rank 1 issues the world's all_reduce only after a broadcast on another group that rank 0
// issues only after its wait timed out: wait(timeout) raises Timeout, the work goes on, and a
// second group runs while the first has work outstanding.
TEST(Async, WaitWithATimeoutRaisesAndTheWorkGoesOn) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    Group other = new_group({0, 1});
    Tensor t = filled(8, rank, 0);
    Tensor b = rank == 0 ? filled(4, 0, 9) : zeros({4});
    if (rank == 0) {
      Work w = all_reduce(t, ReduceOp::Sum, {}, true);
      expect_throw_with<Timeout>([&] { w.wait(std::chrono::milliseconds(20)); },
                                 "not completed within the wait's timeout of 20 ms");
      RANK_CHECK(!w.is_completed(), "still running");
      broadcast(b, 0, other);
      w.wait();
    } else {
      broadcast(b, 0, other);
      all_reduce(t);
    }
    check_summed(t, 2, 0, "all_reduce");
    for (int64_t i = 0; i < 4; ++i)
      RANK_CHECK(b.item(i) == i + 9, "broadcast element " << i);
  }));
}

// Two threads per rank, each looping collectives on its own group, at the same time; the
// ranks issue them with different interleavings (thread timing), which must not matter.
TEST(Threads, TwoThreadsOnTwoGroupsAtOnce) {
  expect_all_ok(run_ranks(3, [](int rank, int p) {
    Group a = new_group({0, 1, 2});
    Group b = new_group({0, 1, 2});
    std::exception_ptr errors[2];
    auto loop = [&](int which) {
      try {
        for (int iter = 0; iter < 150; ++iter) {
          const int64_t n = 1 + (iter * 37) % (which ? 3000 : 20000);
          if (which == 0) {
            Tensor t = filled(n, rank, iter);
            all_reduce(t, ReduceOp::Sum, a);
            check_summed(t, p, iter, "thread 0 all_reduce");
          } else {
            Tensor in = filled(n, rank, iter), out = zeros({p * n});
            all_gather_into_tensor(out, in, b);
            check_gathered_filled(out, p, iter, "thread 1 all_gather");
          }
        }
      } catch (...) {
        errors[which] = std::current_exception();
      }
    };
    std::thread t0(loop, 0), t1(loop, 1);
    t0.join();
    t1.join();
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }));
}

// Rank 2 dies while the others have async work outstanding: every survivor's wait raises
// within the timeout, never hangs.
TEST(Async, KilledRankMakesOutstandingWaitsRaise) {
  testing::RunOptions opt;
  opt.kill_on_failure = false;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "20"}};
  const auto results = run_ranks(
      3,
      [](int rank, int p) {
        // Everyone connected and in step, and past the mailbox's set-up (the first two
        // calls): a rank dying inside UCX's mapping of its shared memory is the chaos test's
        // subject (hardening), not this one's.
        for (int i = 0; i < 3; ++i) {
          Tensor warm = filled(4, rank, i);
          all_reduce(warm);
        }
        // Rank 2 dies only once both others have finished the warm-up: a rank killed right
        // after its last call returns can take that call's last message with it (over TCP,
        // UCX may complete a send whose bytes are still in its own buffer), and a survivor
        // would then fail in the warm-up, not in the calls under test. Each survivor tells
        // rank 2 after its warm-up; rank 2 only receives, so nothing of its own is in flight.
        Tensor done = zeros({1});
        if (rank == 2) {
          recv(done, 0);
          recv(done, 1);
          ::raise(SIGKILL);
        }
        send(done, 2);
        std::vector<Tensor> ts;
        std::vector<Work> works;
        for (int i = 0; i < 4; ++i) {
          ts.push_back(filled(1000, rank, i));
          works.push_back(all_reduce(ts.back(), ReduceOp::Sum, {}, true));
        }
        int raised = 0;
        const auto start = std::chrono::steady_clock::now();
        for (Work& w : works) {
          try {
            w.wait();
          } catch (const PeerFailure&) {
            ++raised;
          } catch (const Timeout&) {
            ++raised;
          } catch (const InvalidArgument& e) {  // later works: the group is broken
            RANK_CHECK(std::string(e.what()).find("unusable after an earlier failure") !=
                           std::string::npos,
                       e.what());
            ++raised;
          }
        }
        const auto took = std::chrono::steady_clock::now() - start;
        RANK_CHECK(raised == 4, "every outstanding wait raised, got " << raised);
        RANK_CHECK(took < std::chrono::seconds(25), "raised within the timeout");
        (void)p;
        std::_Exit(0);  // the world is broken; skip the final handshake
      },
      opt);
  EXPECT_EQ(results[0].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[2].exit_code, 128 + SIGKILL) << testing::describe(results);
}

TEST(Async, ACompletionCallbackThatThrowsBecomesTheWorksErrorAndTheProcessLives) {
  expect_all_ok(run_ranks(2, [](int rank, int p) {
    Group g = new_group({0, 1});
    Tensor t = filled(70000, rank, 0);
    Work w = all_reduce(t, ReduceOp::Sum, g, true);
    w.on_completion([](std::exception_ptr) { throw std::runtime_error("the callback failed"); });
    expect_throw_with<std::runtime_error>([&] { w.wait(); }, "the callback failed");
    RANK_CHECK(w.is_completed() && w.exception(), "completed, with the callback's error");
    check_summed(t, p, 0, "the collective itself");
    Tensor u = filled(10, rank, 1);
    all_reduce(u, ReduceOp::Sum, g);  // the group goes on
    check_summed(u, p, 1, "the next call");
    // A callback added after completion runs at once on this thread; its throw also becomes
    // the work's error instead of escaping from on_completion (found by the chaos harness).
    Tensor v = filled(10, rank, 2);
    Work done = all_reduce(v, ReduceOp::Sum, g, true);
    done.wait();
    done.on_completion([](std::exception_ptr) { throw std::runtime_error("the late callback"); });
    expect_throw_with<std::runtime_error>([&] { done.wait(); }, "the late callback");
    check_summed(v, p, 2, "the call the late callback followed");
  }));
}

TEST(Async, ACompletionCallbackMayDestroyItsGroupOrDropItsLastHandle) {
  expect_all_ok(run_ranks(2, [](int rank, int p) {
    for (int round = 0; round < 20; ++round) {
      Tensor t = filled(1000, rank, round);
      auto holder = std::make_shared<Group>(new_group({0, 1}));
      Work first = all_reduce(t, ReduceOp::Sum, *holder, true);
      if (round % 2 == 0) {
        first.on_completion([holder](std::exception_ptr) { destroy_group(*holder); });
      } else {
        // The callback holds the last handle, and drops it.
        first.on_completion([holder](std::exception_ptr) mutable { *holder = Group(); });
      }
      holder.reset();
      first.wait();
      check_summed(t, p, round, "the call whose callback destroys the group");
    }
    barrier();
  }));
}

}  // namespace
}  // namespace rdmacoll
