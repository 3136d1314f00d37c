// send and recv across real processes over the UCX transport (shared memory, and again with
// UCX_TLS=tcp). Every received element is checked.

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "gather_check.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::input_value;
using testing::run_ranks;

Tensor filled(int64_t n, DType dt, int from, int iter) {
  Tensor t = zeros({n}, dt);
  for (int64_t i = 0; i < n; ++i)
    t.set(i, input_value(from, i, iter, dt));
  return t;
}

void check_from(const Tensor& t, int from, int iter, const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double want = input_value(from, i, iter, t.dtype());
    RANK_CHECK(t.item(i) == want, what << ": element " << i << " of " << t.numel() << " ("
                                       << dtype_name(t.dtype()) << "): got " << t.item(i)
                                       << ", want " << want);
  }
}

// Inline, just past the inline limit (64 KiB on UCX), and 16 MiB.
constexpr int64_t kSizes[] = {0, 1, 1000, (64 << 10) + 1, 16 << 20};

TEST(SendRecv, EveryDtypeAndSizeBothWays) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    int iter = 0;
    for (DType dt : kAllDTypes) {
      for (int64_t bytes : kSizes) {
        if (bytes == (16 << 20) && dt != DType::Float32) continue;  // one large dtype is enough
        const int64_t n = bytes / static_cast<int64_t>(element_size(dt));
        ++iter;
        if (rank == 0) {
          send(filled(n, dt, 0, iter), 1);
          Tensor back = zeros({n}, dt);
          recv(back, 1);
          check_from(back, 1, iter, "rank 0 from rank 1");
        } else {
          Tensor t = zeros({n}, dt);
          recv(t, 0);
          check_from(t, 0, iter, "rank 1 from rank 0");
          send(filled(n, dt, 1, iter), 0);
        }
      }
    }
  }));
}

// Several sends outstanding between one pair under different tags, received in the other
// order; and under one tag, received in the order sent.
TEST(SendRecv, TagsMatchInAnyOrderAndOneTagInIssueOrder) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    for (int64_t n : {int64_t{10}, int64_t{100000}}) {
      if (rank == 0) {
        std::vector<Work> works;
        std::vector<Tensor> keep;
        for (int tag = 0; tag < 4; ++tag) {
          keep.push_back(filled(n, DType::Float32, tag, 7));
          works.push_back(send(keep.back(), 1, {}, tag, true));
        }
        for (int k = 0; k < 3; ++k) {
          keep.push_back(filled(n, DType::Int64, 10 + k, 8));
          works.push_back(send(keep.back(), 1, {}, 9, true));
        }
        for (auto& w : works)
          w.wait();
      } else {
        for (int tag = 3; tag >= 0; --tag) {
          Tensor t = zeros({n});
          recv(t, 0, {}, tag);
          check_from(t, tag, 7, "tag " + std::to_string(tag));
        }
        for (int k = 0; k < 3; ++k) {
          Tensor t = zeros({n}, DType::Int64);
          recv(t, 0, {}, 9);
          check_from(t, 10 + k, 8, "message " + std::to_string(k) + " of tag 9");
        }
      }
    }
  }));
}

// A ring where every rank sends before it receives, blocking on the pair only: one-sided writes
// and inline sends never wait for the receiver to react.
TEST(SendRecv, RingOfIsendsThenRecvsOnFiveRanks) {
  expect_all_ok(run_ranks(5, [](int rank, int p) {
    for (int64_t n : {int64_t{3}, int64_t{300000}}) {
      Tensor out = filled(n, DType::Float32, rank, static_cast<int>(n % 7));
      Work w = send(out, (rank + 1) % p, {}, 0, true);
      Tensor in = zeros({n});
      recv(in, (rank + p - 1) % p);
      w.wait();
      check_from(in, (rank + p - 1) % p, static_cast<int>(n % 7), "ring");
    }
  }));
}

// isend then barrier on one rank, recv then barrier on the other: the send's write must go out
// while its rank waits in the barrier.
TEST(SendRecv, IsendThenACollectiveDoesNotWaitForTheReceiver) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    const int64_t n = 1 << 20;
    if (rank == 0) {
      Tensor t = filled(n, DType::Float32, 0, 1);
      Work w = send(t, 1, {}, 0, true);
      barrier();
      w.wait();
    } else {
      Tensor t = zeros({n});
      recv(t, 0);
      barrier();
      check_from(t, 0, 1, "received before the barrier");
    }
  }));
}

TEST(SendRecv, FromAnySourceTellsWhoSent) {
  expect_all_ok(run_ranks(4, [](int rank, int p) {
    for (int64_t n : {int64_t{16}, int64_t{200000}}) {
      if (rank == 0) {
        std::vector<bool> seen(p, false);
        for (int k = 1; k < p; ++k) {
          Tensor t = zeros({n});
          Work w = recv(t, kAnySource);
          const int from = w.source_rank();
          RANK_CHECK(from >= 1 && from < p && !seen[from], "source " << from);
          seen[from] = true;
          check_from(t, from, 3, "from any source");
        }
      } else {
        send(filled(n, DType::Float32, rank, 3), 0);
      }
      barrier();
    }
  }));
}

TEST(SendRecv, SubgroupsAndBatches) {
  expect_all_ok(run_ranks(4, [](int rank, int) {
    Group g = new_group({3, 1});
    if (rank == 1 || rank == 3) {
      const int other = rank == 1 ? 3 : 1;
      std::vector<P2POp> ops;
      std::vector<Tensor> ins;
      for (int k = 0; k < 3; ++k) {
        ops.push_back(
            {P2POp::Kind::Send, filled(1000 * (k + 1), DType::Int32, rank, k), other, g, k});
        ins.push_back(zeros({1000 * (k + 1)}, DType::Int32));
        ops.push_back({P2POp::Kind::Recv, ins.back(), other, g, k});
      }
      when_all(batch_isend_irecv(ops)).wait();
      for (int k = 0; k < 3; ++k)
        check_from(ins[k], other, k, "batch " + std::to_string(k));
    }
  }));
}

// A batch's waiter starts every part before it helps any: each rank's large send, first in its
// batch, needs the peer's receive, which comes later in the peer's batch. Nested combined works
// and a collective in the same batch complete too, and a part's error is the batch's.
TEST(SendRecv, AWaitedBatchStartsEveryPartAndRaisesAPartsError) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    const int other = 1 - rank;
    for (int iter = 0; iter < 3; ++iter) {
      const int64_t n = (1 << 20) + iter;  // past the inline limit: sent once the receiver clears
      Tensor in = zeros({n});
      const Tensor out = filled(n, DType::Float32, rank, iter);  // alive until the wait
      std::vector<Work> sends = batch_isend_irecv({{P2POp::Kind::Send, out, other, {}, iter}});
      std::vector<Work> recvs = batch_isend_irecv({{P2POp::Kind::Recv, in, other, {}, iter}});
      Tensor sum = zeros({3});
      sum.set(0, rank + 1);
      Work reduced = all_reduce(sum, ReduceOp::Sum, {}, true);
      when_all({when_all(sends), when_all(recvs), reduced}).wait();
      check_from(in, other, iter, "batch " + std::to_string(iter));
      RANK_CHECK(sum.item(0) == 3, "the batch's all_reduce gave " << sum.item(0));
    }
    // The receiver expects fewer bytes than come: both ranks' batches raise the mismatch.
    Tensor in = zeros({rank == 0 ? 100 : 200000});
    const Tensor out = filled(200000, DType::Float32, rank, 9);
    expect_throw_with<InvalidArgument>(
        [&] {
          when_all(batch_isend_irecv({{P2POp::Kind::Send, out, other, {}, 9},
                                      {P2POp::Kind::Recv, in, other, {}, 9}}))
              .wait();
        },
        "sizes must agree");
  }));
}

// An irecv queued behind an isend is started by the send's waiter, whose own send is done at
// once (inline). No one ever waits for the receive; it is only polled, so the point-to-point
// driver (already started, and idle) must carry it. The deadline is the failure, not a pace.
TEST(SendRecv, AnIrecvStartedBehindAWaitedIsendCompletesWhenOnlyPolled) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    const int other = 1 - rank;
    for (int iter = 0; iter < 20; ++iter) {
      Tensor warm = zeros({4});  // the driver exists and has gone idle before the pair
      if (rank == 0) {
        send(filled(4, DType::Float32, 0, iter), 1);
      } else {
        recv(warm, 0);
      }
      barrier();
      if (rank == 0) {
        const Tensor out = filled(8, DType::Float32, 0, iter);
        Tensor in = zeros({8});
        Work s = send(out, other, {}, 1, true);
        Work r = recv(in, other, {}, 2, true);
        s.wait();
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!r.is_completed() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::yield();
        RANK_CHECK(r.is_completed(),
                   "iteration " << iter << ": a polled irecv did not complete in 20 s");
        r.wait();
        check_from(in, other, iter, "polled irecv");
      } else {
        Tensor in = zeros({8});
        recv(in, other, {}, 1);  // the peer's send first, so its receive is still waiting
        check_from(in, other, iter, "send before the polled irecv");
        send(filled(8, DType::Float32, 1, iter), other, {}, 2);
      }
      barrier();
    }
  }));
}

TEST(SendRecvErrors, MistakesRaiseClearly) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    Tensor t = zeros({8});
    expect_throw_with<InvalidArgument>([&] { send(t, rank); }, "is this rank");
    expect_throw_with<InvalidArgument>([&] { send(t, 5); }, "dst 5 is not a member");
    expect_throw_with<InvalidArgument>([&] { recv(t, 1 - rank, {}, -1); }, "tag -1 is outside");
    // Sizes that differ raise on the receiver, on a sender waiting to be cleared, and on the
    // sender of a small message at its next send to that rank (after the acknowledgement).
    if (rank == 0) {
      Tensor big = zeros({100000});
      expect_throw_with<InvalidArgument>([&] { send(big, 1); }, "sizes must agree");
      send(zeros({5}), 1);
      Tensor ack = zeros({1});
      recv(ack, 1, {}, 1);
      expect_throw_with<InvalidArgument>([&] { send(zeros({5}), 1); }, "sizes must agree");
    } else {
      Tensor small = zeros({10});
      expect_throw_with<InvalidArgument>([&] { recv(small, 0); }, "sizes must agree");
      Tensor big = zeros({100000});
      expect_throw_with<InvalidArgument>([&] { recv(big, 0); }, "sizes must agree");
      send(zeros({1}), 0, {}, 1);
    }
    // The pair still works.
    barrier();
    if (rank == 0) {
      send(filled(70000, DType::Float32, 0, 5), 1);
    } else {
      Tensor t = zeros({70000});
      recv(t, 0);
      check_from(t, 0, 5, "after the mistakes");
    }
  }));
}

// A small send has completed when its receiver finds the sizes differ (it went inline, as MPI's
// eager sends): the receiver raises at once, and the sender at its next send to that rank,
// which does not start (nothing of it arrives). A receive on the sender is not refused: the
// acknowledgement below, sent after the refusal, is how the test knows the refusal is there.
TEST(SendRecvErrors, ASmallSendTheReceiverRefusedRaisesAtTheSendersNextSendToThatRank) {
  expect_all_ok(run_ranks(2, [](int rank, int) {
    for (int iter = 0; iter < 2; ++iter) {  // the second time on a refusal receive posted again
      if (rank == 0) {
        send(zeros({5}), 1, {}, 3);
        Tensor ack = zeros({1});
        recv(ack, 1, {}, 4);
        expect_throw_with<InvalidArgument>(
            [&] { send(filled(8, DType::Float32, 0, iter), 1, {}, 3); },
            "completed (it went inline) and was then refused there: recv of 40 bytes from rank "
            "0 (tag 3");
        send(filled(8, DType::Float32, 0, iter), 1, {}, 3);  // the refusal was raised once
      } else {
        Tensor small = zeros({10});
        expect_throw_with<InvalidArgument>(
            [&] { recv(small, 0, {}, 3); },
            "rank 0 sends 20 bytes with this tag, this recv takes 40");
        send(zeros({1}), 0, {}, 4);
        Tensor t = zeros({8});
        recv(t, 0, {}, 3);
        check_from(t, 0, iter, "the send after the refused one");
      }
    }
  }));
}

// A recv no send matches raises Timeout once the group's timeout has passed, not before and not
// much after (the waits check deadlines when they stop polling), on both ranks of the pair.
TEST(SendRecvErrors, ARecvNoSendMatchesTimesOutOnTime) {
  testing::RunOptions opt;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "2"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        Tensor t = zeros({rank == 0 ? 4 : 100000});  // inline, and past the inline limit
        const auto start = std::chrono::steady_clock::now();
        expect_throw_with<Timeout>([&] { recv(t, 1 - rank, {}, 7); }, "no matching send has come");
        const auto took = std::chrono::steady_clock::now() - start;
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
        RANK_CHECK(ms >= 2000 && ms < 6000, "timed out after " << ms << " ms");
      },
      opt));
}

// A peer killed with a recv outstanding: the receiver raises within the timeout.
TEST(SendRecvErrors, APeerKilledWithARecvOutstandingRaises) {
  testing::RunOptions opt;
  opt.kill_on_failure = false;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "10"}};
  const auto results = run_ranks(
      2,
      [](int rank, int) {
        // Rank 1 dies once rank 0's recv is posted. It only receives before dying: a rank killed
        // right after a barrier can take its own barrier message with it, and rank 0 would fail
        // in the barrier, not in the recv under test.
        Tensor done = zeros({1});
        if (rank == 1) {
          recv(done, 0);
          ::raise(SIGKILL);
        }
        Tensor t = zeros({1 << 20});
        Work w = recv(t, 1, {}, 0, true);
        send(done, 1);
        testing::expect_peer_failure_or_timeout([&] { w.wait(); });
        std::_Exit(0);
      },
      opt);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_EQ(results[1].exit_code, 128 + SIGKILL);
}

}  // namespace
}  // namespace rdmacoll
