// Over SoftRoCE (tests/softroce/run-suite.sh): flow control of the shared receive queue, and
// peers that die mid-call.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "verbs_common.hpp"

namespace rdmacoll {
namespace {

// Rank 1 stops making calls (busy for 2 s, far past the few milliseconds its QPs retry
// "receiver not ready") while rank 0 posts `messages` small sends to it, each a SEND (no eager
// slots): every message arrives whole once rank 1 reads. Returns on each rank.
void receiver_stops_calling(int rank, int messages) {
  constexpr int64_t kElements = 5;
  auto value = [](int i, int64_t e) { return static_cast<float>(i * 8 + e); };
  barrier();
  if (rank == 0) {
    std::vector<Tensor> keep;
    std::vector<Work> works;
    for (int i = 0; i < messages; ++i) {
      Tensor t = zeros({kElements});
      for (int64_t e = 0; e < kElements; ++e)
        t.set(e, value(i, e));
      keep.push_back(t);
      works.push_back(send(keep.back(), 1, {}, i % 7, true));
    }
    when_all(works).wait();
  } else {
    // The scenario itself, not a wait for something: a rank busy elsewhere.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    for (int i = 0; i < messages; ++i) {
      Tensor t = zeros({kElements});
      recv(t, 0, {}, i % 7);
      for (int64_t e = 0; e < kElements; ++e)
        RANK_CHECK(t.item(e) == value(i, e),
                   "message " << i << " element " << e << ": got " << t.item(e));
    }
  }
  barrier();
}

// 600 sends, more than rank 1's whole shared receive queue: the sender holds back what its
// receive credits do not cover, and nothing fails. Without credits the queue runs dry and the
// sender's QP exhausts its RNR retries.
TEST(Verbs, AReceiverThatStopsCallingHoldsSendersBackAndNothingFails) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_IB_EAGER_SLOTS", "0"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        require_verbs();
        const uint64_t waits = transport_counter("credit_waits");
        receiver_stops_calling(rank, 600);
        if (rank == 0) {
          RANK_CHECK(transport_counter("credit_waits") > waits, "no send waited for a credit");
        } else {
          RANK_CHECK(transport_counter("receive_credit_writes") > 0, "no credit handed back");
        }
      },
      opt));
}

// The queue's limit event (IBV_EVENT_SRQ_LIMIT_REACHED, armed at 16 receives): with the queue
// held to 20 receives (a test hook), rank 0's 8 credits take it below the limit while rank 1
// is busy; the device reports it, rank 1 counts it (receive_queue_low) once it calls again,
// and the messages still all arrive whole. On a real queue this takes nearly every peer of a
// large job holding every credit at once. The event is read every 10 ms of progress, so the
// ranks agree, call by call, when rank 1 has seen it (at most 500 calls).
TEST(Verbs, TheSharedQueuesLimitEventIsCountedAndNothingFails) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_IB_EAGER_SLOTS", "0"}, {"RDMACOLL_TEST_SRQ_RECEIVES", "20"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        require_verbs();
        receiver_stops_calling(rank, 100);
        bool seen = false;
        for (int i = 0; i < 500 && !seen; ++i) {
          Tensor flag = zeros({1}, DType::Int32);
          flag.set(0, rank == 0 || transport_counter("receive_queue_low") > 0 ? 1 : 0);
          all_reduce(flag, ReduceOp::Min);
          seen = flag.item(0) == 1;
        }
        RANK_CHECK(seen, "rank 1 never counted the shared receive queue's limit event");
      },
      opt));
}

// A peer killed in the middle of a 4 MiB write it receives: the writer raises PeerFailure (or
// Timeout) within the timeout, a second group keeps running meanwhile and after, and the
// writer's sends in flight and send buffers in use fall back to what the pair's own calls hold
// (the failed peer's QPs go to ERR and what was posted there is retired by their flush
// completions; a leaked 4 MiB write alone would hold 4 work requests).
TEST(Verbs, PeerKilledMidWriteGivesItsCapsAndBuffersBack) {
  RunOptions opt;
  opt.init = false;
  opt.kill_on_failure = false;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "20"}};
  auto results = run_ranks(
      3,
      [](int rank, int) {
        init_as_own_host(rank);
        require_verbs();
        Group pair = new_group({0, 1});
        const int64_t n = (4 << 20) / 4;
        auto reduce_pair = [&](int iter) {
          Tensor t = zeros({1000});
          for (int64_t i = 0; i < 1000; ++i)
            t.set(i, rank + iter + i % 3);
          all_reduce(t, ReduceOp::Sum, pair);
          for (int64_t i = 0; i < 1000; ++i)
            RANK_CHECK(t.item(i) == 1 + 2 * (iter + i % 3), "iter " << iter << " element " << i);
        };
        // Quiet: at most the pair's own last call still in flight (its completions are polled
        // by later calls). Both members decide together, so they make the same calls. What was
        // posted to the dead peer comes back with the flush completions of its QPs, moved to
        // ERR when its death is seen: the pair polls for up to 15 s, less than half the QPs'
        // own retry budget (timeout 20, retry 7: about 34 s), so a failure that did not move
        // them to ERR, or caps that did not come back with the flushes, fails the test.
        auto quiet = [&]() {
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
          for (;;) {
            barrier(pair);
            unsigned long long sends = 0, buffers = 0;
            std::sscanf(detail::transport_in_flight().c_str(),
                        "sends_in_flight=%llu send_buffers_in_use=%llu", &sends, &buffers);
            Tensor state = zeros({2}, DType::Int32);  // quiet here; out of time here
            state.set(0, sends <= 2 && buffers <= 1 ? 1 : 0);
            state.set(1, std::chrono::steady_clock::now() >= until ? 1 : 0);
            all_reduce(state, ReduceOp::Sum, pair);
            if (state.item(0) == 2) return true;
            if (state.item(1) > 0) return false;
          }
        };
        if (rank != 2) {
          reduce_pair(0);
          RANK_CHECK(quiet(), "never quiet before the failure: " << detail::transport_in_flight());
        }
        barrier();  // every QP up; rank 2's too
        if (rank == 2) {
          Tensor big = zeros({n});
          Work w = recv(big, 0, {}, 0, true);
          // Dies once the first bytes have landed: the write is under way.
          const volatile float* first = static_cast<const float*>(big.data());
          while (*first == 0.0f)
            std::this_thread::yield();
          ::raise(SIGKILL);
        }
        if (rank == 0) {
          Tensor big = zeros({n});
          for (int64_t i = 0; i < n; ++i)
            big.set(i, 1 + i % 5);
          Work w = send(big, 2, {}, 0, true);
          for (int iter = 1; iter <= 5; ++iter)
            reduce_pair(iter);
          testing::expect_peer_failure_or_timeout([&] { w.wait(); });
        } else {
          for (int iter = 1; iter <= 5; ++iter)
            reduce_pair(iter);
        }
        for (int iter = 6; iter <= 10; ++iter)
          reduce_pair(iter);
        RANK_CHECK(quiet(), "what was in flight to the dead peer never came back: "
                                << detail::transport_in_flight());
        destroy_process_group();
      },
      opt);
  EXPECT_EQ(results[0].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[2].exit_code, 128 + SIGKILL) << testing::describe(results);
}

// Group A = {0, 1, 2} times out because rank 2 is stopped (SIGSTOP), while group B = {0, 1}
// keeps running over the same pair, during A's wait and after, every element checked. Then the
// slow-peer case: group C = {0, 1} times out on rank 0 because rank 1 comes late, and rank 1
// enters that call only after rank 0's has failed and dropped its output's registration: rank 1
// finds rank 0's descriptor and may write into an output that is gone. Neither may break the
// healthy pair for B: a failure of one group stays in that group (issue 45, N3).
TEST(Verbs, AGroupTimingOutLeavesAnotherGroupOverTheSamePairRunning) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      3,
      [](int rank, int) {
        init_as_own_host(rank);
        require_verbs();
        Tensor pid = zeros({1}, DType::Int64);
        pid.set(0, static_cast<double>(::getpid()));
        Tensor pids = zeros({3}, DType::Int64);
        all_gather_into_tensor(pids, pid);
        Group a = new_group({0, 1, 2}, std::chrono::seconds(3));
        Group b = new_group({0, 1});
        Group c = new_group({0, 1}, std::chrono::seconds(2));
        const int64_t n = (256 << 10) / 4;
        if (rank == 2) {
          ::raise(SIGSTOP);  // until rank 0 lets it go on
          destroy_process_group();
          return;
        }
        int iter = 0;
        auto b_call = [&] {
          gather_and_check(b, n, DType::Float32, DType::Float32, false, iter++);
        };
        for (int k = 0; k < 3; ++k)
          b_call();
        // Both enter A together; B runs while they wait for rank 2.
        Tensor in = zeros({n}), out = zeros({3 * n});
        Work w = all_gather_into_tensor(out, in, a, true);
        for (int k = 0; k < 5; ++k)
          b_call();
        testing::expect_peer_failure_or_timeout([&] { w.wait(); });
        for (int k = 0; k < 5; ++k)
          b_call();
        // C: rank 0's call fails before rank 1 enters it.
        Tensor c_in = zeros({n}), c_out = zeros({2 * n});
        if (rank == 0) {
          testing::expect_peer_failure_or_timeout([&] { all_gather_into_tensor(c_out, c_in, c); });
        }
        b_call();  // rank 1 is here once rank 0's C call is over
        if (rank == 1) {
          try {
            all_gather_into_tensor(c_out, c_in, c);
          } catch (const Error& e) {
            std::printf("rank 1: group C's late call: %s\n", e.what());
          }
        }
        for (int k = 0; k < 10; ++k)
          b_call();
        if (rank == 0) ::kill(static_cast<pid_t>(pids.item(2)), SIGCONT);
        destroy_process_group();
      },
      opt));
}

// Two rails in two subnets with no route between them (suite-in-vm.sh adds rxe1 on a second
// netdev, 10.78.0.1/24, beside rxe0 on 10.77.0.1/24, and names it in
// RDMACOLL_TEST_SECOND_RAIL): rank 0 on rxe0 and rank 1 on rxe1 cannot reach each other. The
// pair is refused when it first connects, on both ranks, with an error naming both NICs and
// their addresses, not after its QPs exhaust their retries (about 34 s).
TEST(Verbs, APairOnRailsThatCannotReachEachOtherIsRefusedAtConnectNamingBothNics) {
  const char* second = std::getenv("RDMACOLL_TEST_SECOND_RAIL");
  if (!second) GTEST_SKIP() << "no second rail (suite-in-vm.sh adds one at its end)";
  const std::string rail1 = second;
  RunOptions opt;
  opt.init = false;
  opt.kill_on_failure = false;
  expect_all_ok(run_ranks(
      2,
      [&rail1](int rank, int) {
        ::setenv("RDMACOLL_IB_DEVICE", rank == 0 ? "rxe0" : rail1.c_str(), 1);
        init_as_own_host(rank);
        require_verbs();
        const auto t0 = std::chrono::steady_clock::now();
        Tensor in = zeros({4}), out = zeros({8});
        try {
          all_gather_into_tensor(out, in);
          RANK_CHECK(false, "a pair on two unrouted rails was connected");
        } catch (const Error& e) {
          const std::string what = e.what();
          RANK_CHECK(what.find("rank 1's " + rail1 +
                               ":1 (10.78.0.1) is not reachable from "
                               "rank 0's rxe0:1 (10.77.0.1)") != std::string::npos,
                     "the error does not name both NICs: " << what);
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        RANK_CHECK(s < 15, "refused only after " << s << " s");
        destroy_process_group();
      },
      opt));
}

TEST(Verbs, KilledRankGivesPeerFailureOrTimeout) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_TIMEOUT_S", "20"}};
  opt.kill_on_failure = false;
  auto results = run_ranks(
      3,
      [](int rank, int world) {
        require_verbs();
        testing::gather_until_a_peer_dies(rank, world, 64, 2, 5);
      },
      opt);
  EXPECT_EQ(results[0].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << testing::describe(results);
  EXPECT_EQ(results[2].exit_code, 128 + SIGKILL);
}

}  // namespace
}  // namespace rdmacoll
