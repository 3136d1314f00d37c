// Over SoftRoCE (tests/softroce/run-suite.sh): the verbs write ring (eager slots) that carries
// small calls' descriptors, its credits (a message waits for a free slot) and wake-ups; ring calls.

#include <gtest/gtest.h>

#include <cstdio>

#include "ring_calls.hpp"
#include "verbs_common.hpp"

namespace rdmacoll {
namespace {

// `calls` all-gathers of 2 int32 per rank (8 B: inline in the descriptor), every element
// checked; what the eager counters moved by. `late`: messages found only after a sleep ran to
// poll()'s 100 ms timeout. A lost wake-up shows there, but so does a writer that took that long
// to ring (5 ranks on 2 slow vCPUs, ASan): only the sleep test, on fast ranks, asserts it.
struct EagerMoves {
  uint64_t writes = 0, slot_waits = 0, sleeps = 0, rings = 0, late = 0;
};
EagerMoves small_calls(int rank, int world, int calls) {
  Tensor in = zeros({2}, DType::Float32);
  Tensor out = zeros({2 * world}, DType::Float32);
  const char* names[] = {"eager_writes", "eager_slot_waits", "eager_sleeps", "eager_rings",
                         "eager_late"};
  uint64_t before[5], after[5];
  for (int i = 0; i < 5; ++i)
    before[i] = transport_counter(names[i]);
  for (int iter = 0; iter < calls; ++iter) {
    testing::fill_input(in, rank, iter);
    all_gather_into_tensor(out, in);
    testing::check_gathered(out, world, iter, DType::Float32);
  }
  for (int i = 0; i < 5; ++i)
    after[i] = transport_counter(names[i]);
  const EagerMoves m{after[0] - before[0], after[1] - before[1], after[2] - before[2],
                     after[3] - before[3], after[4] - before[4]};
  std::printf(
      "rank %d: %d calls: eager_writes=%llu eager_slot_waits=%llu eager_sleeps=%llu "
      "eager_rings=%llu eager_late=%llu\n",
      rank, calls, static_cast<unsigned long long>(m.writes),
      static_cast<unsigned long long>(m.slot_waits), static_cast<unsigned long long>(m.sleeps),
      static_cast<unsigned long long>(m.rings),
      static_cast<unsigned long long>(after[4] - before[4]));
  return m;
}

// Small calls' descriptors (their chunks inline) go by RDMA WRITE into the peer's eager slots:
// every call writes at least one message per peer there (a peer with a ring gets no SENDs).
// The results are checked element by element.
TEST(Verbs, EagerSlotsCarrySmallCalls) {
  for (int world : {2, 3}) {
    expect_all_ok(run_ranks(world, [](int rank, int p) {
      require_verbs();
      const int calls = 200;
      const EagerMoves m = small_calls(rank, p, calls);
      RANK_CHECK(m.writes >= static_cast<uint64_t>(calls * (p - 1)),
                 m.writes << " eager writes for " << calls << " calls");
    }));
  }
}

// RDMACOLL_SPIN_US=0: every wait sleeps at once, so every call runs the sleep handshake: the
// receiver announces its sleep epoch, the writer rings it after its write has landed. A lost
// wake-up would show as a message found only after poll()'s 100 ms timeout (eager_late).
TEST(Verbs, EagerSlotsWakeReceiversThatSleep) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_SPIN_US", "0"}};
  for (int world : {2, 3}) {
    expect_all_ok(run_ranks(
        world,
        [](int rank, int p) {
          require_verbs();
          const EagerMoves m = small_calls(rank, p, 200);
          RANK_CHECK(m.writes >= static_cast<uint64_t>(200 * (p - 1)), m.writes << " writes");
          RANK_CHECK(m.late == 0, m.late << " eager messages found only after a 100 ms sleep");
          // The rank that comes first to a call sleeps; the later one rings it.
          RANK_CHECK(m.sleeps + m.rings > 0, "neither slept nor rang with RDMACOLL_SPIN_US=0");
        },
        opt));
  }
}

// One slot per peer: a message waits for the credit of the one before it (no SEND takes its
// place, which could overtake it), and every call still checks.
TEST(Verbs, EagerMessagesWaitForAFreeSlotAndNeverGoAsSends) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_IB_EAGER_SLOTS", "1"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int p) {
        require_verbs();
        const EagerMoves m = small_calls(rank, p, 60);
        RANK_CHECK(m.writes >= 60, m.writes << " eager writes for 60 calls");
      },
      opt));
}

// Five ranks, each its own host: the descriptors ride Bruck's rounds (rank - 2^k), so some
// pairs carry messages one way only (rank r + 2 writes to r, r never to r + 2) and the
// receiver's credits cannot ride on messages of its own: it writes them back every half ring.
// Without them the writer would wait for a free slot after 8 messages, for ever.
TEST(Verbs, EagerSlotsCreditsComeBackOneWay) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      5,
      [](int rank, int p) {
        init_as_own_host(rank);
        require_verbs();
        const uint64_t credits = transport_counter("eager_credit_writes");
        const EagerMoves m = small_calls(rank, p, 100);
        const uint64_t wrote = transport_counter("eager_credit_writes") - credits;
        std::printf("rank %d: eager_credit_writes=%llu\n", rank,
                    static_cast<unsigned long long>(wrote));
        RANK_CHECK(m.writes >= 100, m.writes << " eager writes for 100 calls");
        RANK_CHECK(wrote > 0, "no credit written back");
        destroy_process_group();
      },
      opt));
}

// Eager slots are used by a pair only when both sides have a ring: one rank without them
// (RDMACOLL_IB_EAGER_SLOTS=0) makes both send, and the calls still check.
TEST(Verbs, EagerSlotsOffOnOneRankMeansSendsForThePair) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      2,
      [](int rank, int p) {
        ::setenv("RDMACOLL_IB_EAGER_SLOTS", rank == 0 ? "0" : "8", 1);
        init_process_group();
        require_verbs();
        const EagerMoves m = small_calls(rank, p, 50);
        RANK_CHECK(m.writes == 0 && m.slot_waits == 0,
                   m.writes << " eager writes, " << m.slot_waits << " slot waits");
        destroy_process_group();
      },
      opt));
}

// Ring all-gathers across hosts: QPs to the two ring neighbours only, one control message per
// call (an RDMA WRITE into the predecessor's eager slots), and every disagreement raised on
// every rank, found by the odd rank's neighbours and spread along the ring; the predecessor's
// writes land before a rank returns (tests/integration/ring_calls.hpp). The ring is forced so
// that 16 KiB per rank takes it (the selector's is 1 MiB).
TEST(Verbs, RingCallsConnectTwoNeighboursAndDisagreementsRaiseEverywhere) {
  RunOptions opt;
  opt.init = false;
  opt.env = {{"RDMACOLL_ALGO", "ring"}};
  expect_all_ok(run_ranks(
      5,
      [](int rank, int world) {
        init_as_own_host(rank);
        require_verbs();
        testing::ring_calls_talk_to_two_neighbours(4096);
        testing::ring_reduce_scatters_talk_to_two_neighbours(4096);
        testing::ring_disagreements_raise_everywhere(rank, world, 4096);
        destroy_process_group();
      },
      opt));
}

}  // namespace
}  // namespace rdmacoll
