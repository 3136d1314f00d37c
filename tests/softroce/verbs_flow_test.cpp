// Over SoftRoCE (tests/softroce/run-suite.sh): flow control both ways at once. Two ranks each
// post many isends to the other before any irecv (a pipeline schedule's batch_isend_irecv, or
// many async groups sending descriptors to one peer): more messages than the peer's eager slots
// and receive credits cover, so each side waits for credits the other owes while it owes
// credits itself. The writes that hand credits back must never wait behind the work that waits
// for them, and the messages must come out in the order they were sent, whichever path (eager
// slot or SEND) each took.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "verbs_common.hpp"

namespace rdmacoll {
namespace {

struct Flood {
  int messages;
  int tags;            // message i carries tag i % tags
  int64_t elements;    // float32 elements per message
  bool batch = false;  // batch_isend_irecv, else isend/irecv one by one
};

// Every element of message i from `from` in `round`: its first element names the message
// exactly (a message delivered to the wrong receive shows which one it was), the rest vary.
float flood_value(int from, int round, int i, int64_t e) {
  if (e == 0) return static_cast<float>(from * 1'000'000 + round * 10'000 + i);
  return static_cast<float>((from * 31 + i * 7 + round * 13 + e * 3) % 1000);
}

void flood_both_ways(int rank, const Flood& f, int round) {
  const int other = 1 - rank;
  std::vector<Tensor> out(f.messages), in(f.messages);
  for (int i = 0; i < f.messages; ++i) {
    out[i] = zeros({f.elements});
    auto* o = static_cast<float*>(out[i].data());
    for (int64_t e = 0; e < f.elements; ++e)
      o[e] = flood_value(rank, round, i, e);
    in[i] = zeros({f.elements});
    std::memset(in[i].data(), 0xff, in[i].nbytes());  // NaN: nothing expected matches it
  }
  std::vector<Work> works;
  if (f.batch) {
    std::vector<P2POp> ops;
    for (int i = 0; i < f.messages; ++i)
      ops.push_back({P2POp::Kind::Send, out[i], other, {}, i % f.tags});
    for (int i = 0; i < f.messages; ++i)
      ops.push_back({P2POp::Kind::Recv, in[i], other, {}, i % f.tags});
    works = batch_isend_irecv(ops);
  } else {
    // Every send is posted (and the library progresses them) before the first receive.
    for (int i = 0; i < f.messages; ++i)
      works.push_back(send(out[i], other, {}, i % f.tags, true));
    for (int i = 0; i < f.messages; ++i)
      works.push_back(recv(in[i], other, {}, i % f.tags, true));
  }
  for (Work& w : works)
    w.wait();
  for (int i = 0; i < f.messages; ++i) {
    const auto* got = static_cast<const float*>(in[i].data());
    for (int64_t e = 0; e < f.elements; ++e) {
      RANK_CHECK(got[e] == flood_value(other, round, i, e),
                 "round " << round << ", receive #" << i << " (tag " << i % f.tags << "), element "
                          << e << " of " << f.elements << ": got " << got[e] << ", want "
                          << flood_value(other, round, i, e) << " (element 0 names message "
                          << static_cast<int64_t>(got[0]) % 10'000 << ")");
    }
  }
}

void run_floods(const std::vector<Flood>& floods, const std::string& eager_slots) {
  RunOptions opt;
  opt.init = false;
  if (!eager_slots.empty()) opt.env = {{"RDMACOLL_IB_EAGER_SLOTS", eager_slots}};
  expect_all_ok(run_ranks(
      2,
      [&floods](int rank, int) {
        init_as_own_host(rank);
        require_verbs();
        for (const Flood& f : floods) {
          for (int round = 0; round < 5; ++round)
            flood_both_ways(rank, f, round);
        }
        destroy_process_group();
      },
      opt));
}

// 16 floats: 4 (within the credits), 16 and 40 (past the eager slots and receive credits both)
// and 200, on one tag and on 7 tags cycling, one by one and as one batch; 5 rounds each.
std::vector<Flood> small_floods() {
  std::vector<Flood> v;
  for (int n : {4, 16, 40, 200}) {
    for (int tags : {1, 7}) {
      v.push_back({n, tags, 16});
      v.push_back({n, tags, 16, true});
    }
  }
  return v;
}

// 1 MiB each: the headers go as control messages, the bytes as one-sided writes.
std::vector<Flood> large_floods() {
  return {{4, 1, 1 << 18}, {16, 1, 1 << 18}, {16, 3, 1 << 18, true}};
}

TEST(VerbsFlowControl, SmallIsendsBothWaysPastEveryCreditArriveInOrder) {
  run_floods(small_floods(), "");
}

TEST(VerbsFlowControl, SmallIsendsBothWaysPastEveryCreditArriveInOrderWithoutEagerSlots) {
  run_floods(small_floods(), "0");
}

TEST(VerbsFlowControl, LargeIsendsBothWaysPastEveryCreditArriveInOrder) {
  run_floods(large_floods(), "");
}

TEST(VerbsFlowControl, LargeIsendsBothWaysPastEveryCreditArriveInOrderWithoutEagerSlots) {
  run_floods(large_floods(), "0");
}

// Rank 0 caps its path MTU at 256 bytes (RDMACOLL_IB_MTU), rank 1 keeps the port's (1024 on
// rxe): both ends must take the smaller, or the capped end drops every packet above its MTU and
// the pair stalls in retries. Multi-packet writes and eager messages, every element checked.
TEST(VerbsWire, RanksWithDifferentMtuCapsAgreeOnThePathAndGatherRight) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        if (rank == 0) ::setenv("RDMACOLL_IB_MTU", "256", 1);
        init_process_group();
        require_verbs();
        for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{70000}, int64_t{1} << 18})
          gather_and_check({}, n, DType::Float32, DType::Float32, n % 2 == 0);
        destroy_process_group();
      },
      opt));
}

}  // namespace
}  // namespace rdmacoll
