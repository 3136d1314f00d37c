#pragma once
// Ring all-gathers across hosts: each rank exchanges its call descriptor with its two ring
// neighbours only, and a disagreement is found by the neighbours of the rank that differs and
// spread along the ring to everyone else. Shared by the integration list (UCX, every rank its
// own host on this machine) and the SoftRoCE list (verbs). Every rank must be its own host
// (RDMACOLL_HOST_ID) in a group of a size that is not a power of two, with at least 3 ranks.

#include <cstdlib>
#include <functional>
#include <string>

#include "api/debug.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"

namespace rdmacoll::testing {

// Whether this run takes descriptors on the direct round (RDMACOLL_DESCRIPTORS=direct): then
// every call sends p - 1 and there is no ring step to count.
inline bool descriptors_forced_direct() {
  const char* v = std::getenv("RDMACOLL_DESCRIPTORS");
  return v && std::string(v) == "direct";
}

// Runs `calls` (3 ring calls) and checks they sent one control message each and that this
// rank has connected its two ring neighbours and no one else.
inline void expect_one_message_per_call_and_two_peers(const std::function<void(int)>& call,
                                                      const char* what) {
  const uint64_t before = detail::control_messages_sent();
  for (int iter = 0; iter < 3; ++iter)
    call(iter);
  const uint64_t sent = detail::control_messages_sent() - before;
  if (descriptors_forced_direct()) return;
  RANK_CHECK(sent == 3, sent << " control messages for 3 " << what << "; want 1 each");
  RANK_CHECK(detail::connected_peers() == 2, detail::connected_peers()
                                                 << " peers connected by ring calls; want 2");
}

// `ring_numel` float32 elements per rank make the selector pick the ring (1 MiB, or less with
// RDMACOLL_ALGO=ring). On a world that has made no call yet: the ring calls connect the two
// ring neighbours only and send one control message per call.
inline void ring_calls_talk_to_two_neighbours(int64_t ring_numel) {
  expect_one_message_per_call_and_two_peers(
      [&](int iter) {
        gather_and_check({}, ring_numel, DType::Float32, DType::Float32, false, iter);
      },
      "ring all-gathers");
}

// The ring reduce-scatter (every reduce-scatter across hosts above the eager limit) likewise:
// `numel` float32 elements per rank and piece, one control message per call, the same two
// neighbours.
inline void ring_reduce_scatters_talk_to_two_neighbours(int64_t numel) {
  expect_one_message_per_call_and_two_peers(
      [&](int iter) {
        reduction::reduce_scatter_and_check({}, numel, DType::Float32, ReduceOp::Sum, iter,
                                            reduction::Layout::Flat);
      },
      "ring reduce-scatters");
}

enum class RingDisagreement {
  Size,            // one rank a larger ring call
  SmallAmongRing,  // one rank a small call (inline, all descriptors) among ring calls
  RingAmongSmall,  // one rank a ring call among small calls
  Barrier,         // one rank a barrier among ring calls
  LocalError,      // one rank rejects its own output shape
};

// One call in which rank `odd` differs as `kind` says: every rank raises InvalidArgument naming
// the disagreement (a rank that timed out would raise Timeout), and no rank's output holds
// anything but its sentinel or the right chunk (a ring rank may have written its predecessor's
// chunks before the error reached it; never past the tensor). Then the group goes on.
inline void expect_ring_disagreement_raises_everywhere(int rank, int world, int64_t ring_numel,
                                                       RingDisagreement kind, int odd, int iter) {
  const bool me_odd = rank == odd;
  int64_t n = ring_numel;
  if (kind == RingDisagreement::Size && me_odd) n = 2 * ring_numel;
  if (kind == RingDisagreement::SmallAmongRing && me_odd) n = 8;
  if (kind == RingDisagreement::RingAmongSmall && !me_odd) n = 8;
  Tensor in = zeros({n});
  for (int64_t i = 0; i < n; ++i)
    in.set(i, input_value(rank, i, 0, DType::Float32));
  const int64_t out_numel = world * n + (kind == RingDisagreement::LocalError && me_odd ? 1 : 0);
  Tensor out = zeros({out_numel});
  for (int64_t i = 0; i < out_numel; ++i)
    out.set(i, -7);
  std::string needle = "disagree";
  if (kind == RingDisagreement::Barrier) needle = "different collectives";
  if (kind == RingDisagreement::LocalError) {
    needle =
        me_odd ? "expected group size" : "rank " + std::to_string(odd) + " rejected its arguments";
  }
  if (kind == RingDisagreement::Barrier && me_odd) {
    expect_throw_with<InvalidArgument>([&] { barrier(); }, needle);
  } else {
    expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in); }, needle);
  }
  for (int64_t i = 0; i < out_numel; ++i) {
    const double got = out.item(i);
    const int64_t r = i / n;
    const bool right =
        r < world && got == input_value(static_cast<int>(r), i % n, 0, DType::Float32);
    RANK_CHECK(got == -7 || right, "element " << i << " of a failed call holds " << got);
  }
  gather_and_check({}, ring_numel, DType::Float32, DType::Float32, false, iter);
  gather_and_check({}, 8, DType::Float32, DType::Float32, false, iter);
}

// A ring reduce-scatter in which rank `odd` passes twice the others' size: every rank raises,
// then the group goes on.
inline void expect_ring_reduce_scatter_disagreement_raises_everywhere(int rank, int world,
                                                                      int64_t numel, int odd,
                                                                      int iter) {
  const int64_t n = rank == odd ? 2 * numel : numel;
  Tensor in = zeros({world * n});
  Tensor out = zeros({n});
  expect_throw_with<InvalidArgument>([&] { reduce_scatter_tensor(out, in, ReduceOp::Sum); },
                                     "disagree");
  reduction::reduce_scatter_and_check({}, numel, DType::Float32, ReduceOp::Sum, iter,
                                      reduction::Layout::Flat);
}

inline void ring_disagreements_raise_everywhere(int rank, int world, int64_t ring_numel) {
  for (int odd : {0, world - 1})
    expect_ring_reduce_scatter_disagreement_raises_everywhere(rank, world, 4096, odd, odd);
  int iter = 1;
  for (RingDisagreement kind :
       {RingDisagreement::Size, RingDisagreement::SmallAmongRing, RingDisagreement::RingAmongSmall,
        RingDisagreement::Barrier, RingDisagreement::LocalError}) {
    for (int odd : {0, world / 2}) {
      expect_ring_disagreement_raises_everywhere(rank, world, ring_numel, kind, odd, iter++);
    }
  }
}

}  // namespace rdmacoll::testing
