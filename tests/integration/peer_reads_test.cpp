// all_gather where the members copy each other's chunks out of each other's memory
// (engine/collectives/all_gather.cpp, gather_by_reads; on one host the kernel's CMA), on the
// in-process fabric with its reads allowed (Fabric::allow_reads): every element, the byte
// counts, a rank that must not return while a peer still reads, and a chunk that cannot be
// read. The same path runs between processes in the shm. tests (AllGather.ChunksFrom16KiB...).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "engine/collectives/all_gather.hpp"
#include "engine/collectives/all_reduce.hpp"
#include "engine/collectives/broadcast.hpp"
#include "engine/collectives/reduce_scatter.hpp"
#include "engine/collectives/registry.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/tensor.hpp"
#include "support/inprocess_world.hpp"

namespace rdmacoll::engine {
namespace {

// body(c) on 2, 3 and 5 ranks of one host whose fabric lets them read each other's memory.
template <typename Body>
void run_reading_worlds(Body body) {
  for (int p : {2, 3, 5})
    run_world(p, hosts_for(p, 0), body, SIZE_MAX, {}, [](Fabric& f) { f.allow_reads(true); });
}

// Where every member can read every other's memory (the fabric allows it, as the kernel's CMA
// does on one host), chunks past the inline path are copied out of the peers' memory: every
// element right, flat and in place, p - 1 chunks read per call and nothing written. An input the
// output converts (odd calls) still takes the writes.
TEST(PeerReadsOnLoopback, PeersCopyEachOthersChunksOutOfTheirMemoryWhereTheyCanReadIt) {
  run_reading_worlds([](RankContext& c) {
    const auto t = c.group.transport.lock();
    const int64_t n = 70000;     // 280 KB: past the 64 KiB eager limit
    for (int k = 0; k < 3; ++k)  // the mailbox and its reads take over from the third call
      gather_checked(c, n, k);
    for (int call = 3; call < 7; ++call) {
      const auto before = t->statistics();
      gather_checked(c, n, call);
      const auto after = t->statistics();
      const bool converts = call % 2 == 1;
      const uint64_t read = after.bytes_read - before.bytes_read;
      const uint64_t chunks = static_cast<uint64_t>(c.p - 1) * n * 4;
      check(read == (converts ? 0 : chunks),
            "call " + std::to_string(call) + ": " + std::to_string(read) + " bytes read");
    }
    // In place: the input is the rank's own slot of the output.
    Tensor out = zeros({c.p * n}, DType::Float32);
    for (int64_t i = 0; i < n; ++i)
      out.set(c.rank * n + i, value_of(c.rank, i, 9));
    RoundArgs a;
    a.collective = &collectives::kAllGather;
    a.out = out.data();
    a.out_dtype = a.in_dtype = DType::Float32;
    a.out_numel = out.numel();
    a.in = static_cast<float*>(out.data()) + c.rank * n;
    a.in_numel = n;
    all_gather(c.engine, c.group, a);
    for (int r = 0; r < c.p; ++r)
      for (int64_t i = 0; i < n; ++i)
        check(out.item(r * n + i) == value_of(r, i, 9),
              "in place: chunk " + std::to_string(r) + " element " + std::to_string(i));
  });
}

// A rank must not return while a peer may still be reading its chunk: the user may change the
// input at once. Rank 0 holds back its read of rank 1's chunk until rank 1 has returned (or
// 300 ms have passed); rank 1 scribbles over its input as soon as it returns. Rank 1 returns
// only after every member read, so rank 0 reads the chunk as it was.
TEST(PeerReadsOnLoopback, NoRankReturnsBeforeEveryPeerHasReadItsChunk) {
  std::atomic<bool> returned{false};
  std::atomic<int> held{0};
  run_world(
      2, hosts_for(2, 0),
      [&](RankContext& c) {
        const int64_t n = 70000;
        for (int k = 0; k < 3; ++k)
          gather_checked(c, n, 2 * k);
        Tensor in = zeros({n}, DType::Float32), out = zeros({2 * n}, DType::Float32);
        for (int64_t i = 0; i < n; ++i)
          in.set(i, value_of(c.rank, i, 8));
        RoundArgs a;
        a.collective = &collectives::kAllGather;
        a.out = out.data();
        a.out_dtype = a.in_dtype = DType::Float32;
        a.out_numel = out.numel();
        a.in = in.data();
        a.in_numel = n;
        all_gather(c.engine, c.group, a);
        if (c.rank == 1) {
          returned = true;
          for (int64_t i = 0; i < n; ++i)
            in.set(i, -7);
        }
        for (int r = 0; r < 2; ++r)
          for (int64_t i = 0; i < n; ++i)
            check(out.item(r * n + i) == value_of(r, i, 8),
                  "chunk " + std::to_string(r) + " element " + std::to_string(i) + " is " +
                      std::to_string(out.item(r * n + i)));
      },
      SIZE_MAX, {},
      [&](Fabric& f) {
        f.allow_reads(true);
        f.on_read([&](int reader, int) {
          // The fourth gather's read by rank 0 (the first three are the set-up's and warm-up).
          if (reader != 0 || held.fetch_add(1) != 1) return;
          const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
          while (!returned && std::chrono::steady_clock::now() < until)
            std::this_thread::yield();
        });
      });
  EXPECT_GE(held.load(), 2);
}

// A chunk that cannot be read (a peer's address that is not readable there) raises on every
// rank, in the same call, naming the rank whose chunk it was, and the group goes on.
TEST(PeerReadsOnLoopback, AChunkThatCannotBeReadRaisesOnEveryRankAndTheGroupGoesOn) {
  for (int p : {2, 3}) {
    run_world(
        p, hosts_for(p, 0),
        [](RankContext& c) {
          for (int k = 0; k < 3; ++k)
            gather_checked(c, 3, k);  // inline: nothing read
          // Past the set-up, whose probe every rank has made once rank 0 is past call #1.
          if (c.rank == 0) c.fabric.refuse_reads_from(c.p - 1);
          try {
            gather_checked(c, 70000, 4);
            check(false, "no error");
          } catch (const InvalidArgument& e) {
            const std::string what = e.what();
            check(what.find("reading rank " + std::to_string(c.p - 1) + "'s data failed") !=
                      std::string::npos,
                  "the unreadable chunk is named: " + what);
          }
          gather_checked(c, 3, 6);  // the group goes on
        },
        SIZE_MAX, {}, [](Fabric& f) { f.allow_reads(true); });
  }
}

// A broadcast past the inline path: every member but the root copies the root's tensor out of
// its memory, from every root, every element right; the root reads nothing.
TEST(PeerReadsOnLoopback, BroadcastCopiesTheRootsTensorIntoEveryOtherMember) {
  run_reading_worlds([](RankContext& c) {
    const auto t = c.group.transport.lock();
    for (int k = 0; k < 2; ++k)
      gather_checked(c, 3, k);  // the set-up
    const int64_t n = 70000;
    for (int root = 0; root < c.p; ++root) {
      Tensor b = zeros({n}, DType::Int32);
      for (int64_t i = 0; i < n; ++i)
        b.set(i, c.rank == root ? value_of(root, i, 2) : -1);
      const uint64_t before = t->statistics().bytes_read;
      broadcast(c.engine, c.group,
                {.data = b.data(), .dtype = DType::Int32, .numel = n, .root = root});
      for (int64_t i = 0; i < n; ++i)
        check(b.item(i) == value_of(root, i, 2),
              "root " + std::to_string(root) + ": element " + std::to_string(i));
      const uint64_t read = t->statistics().bytes_read - before;
      check(read == (c.rank == root ? 0 : static_cast<uint64_t>(n) * 4),
            "root " + std::to_string(root) + ": " + std::to_string(read) + " bytes read");
    }
  });
}

// reduce_scatter_tensor and all_reduce past the inline path: each member copies its piece of
// every peer's input out of the peer's memory (and all_reduce then gathers the reduced pieces
// the same way): every element right, in sizes that leave a tail for all_reduce's inline
// round, and p - 1 pieces read per reduce-scatter.
TEST(PeerReadsOnLoopback, ReductionsReadTheirPiecesOutOfEveryPeer) {
  run_reading_worlds([](RankContext& c) {
    const auto t = c.group.transport.lock();
    for (int k = 0; k < 2; ++k)
      gather_checked(c, 3, k);  // the set-up
    const int64_t n = 70001;
    Tensor in = zeros({c.p * n}, DType::Float64), out = zeros({n}, DType::Float64);
    for (int64_t i = 0; i < c.p * n; ++i)
      in.set(i, value_of(c.rank, i, 1));
    const uint64_t before = t->statistics().bytes_read;
    reduce_scatter(
        c.engine, c.group,
        {.out = out.data(), .in = in.data(), .dtype = DType::Float64, .n = n, .op = ReduceOp::Max});
    for (int64_t i = 0; i < n; ++i) {
      double want = -1;
      for (int r = 0; r < c.p; ++r)
        want = std::max(want, value_of(r, c.rank * n + i, 1));
      check(out.item(i) == want, "reduce_scatter element " + std::to_string(i));
    }
    const uint64_t read = t->statistics().bytes_read - before;
    check(read == static_cast<uint64_t>(c.p - 1) * n * 8,
          "reduce_scatter: " + std::to_string(read) + " bytes read");
    Tensor d = zeros({n}, DType::Float64);
    for (int64_t i = 0; i < n; ++i)
      d.set(i, value_of(c.rank, i, 0));
    all_reduce(c.engine, c.group,
               {.data = d.data(), .dtype = DType::Float64, .numel = n, .op = ReduceOp::Sum});
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < c.p; ++r)
        want += value_of(r, i, 0);
      check(d.item(i) == want, "all_reduce element " + std::to_string(i));
    }
  });
}

}  // namespace
}  // namespace rdmacoll::engine
