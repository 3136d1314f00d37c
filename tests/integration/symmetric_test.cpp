// Symmetric memory (rdmacoll::empty) across real processes: all_gather_into_tensor into such a
// tensor stores every chunk straight into every member's output; all_reduce on one folds each
// segment once and stores it into every member's tensor; reduce_scatter_tensor from one folds
// each member's piece straight out of every member's input; broadcast of one copies it straight
// out of the root's part. Every element of every rank's output checked, the transport's written
// bytes counted, and a rank whose output is not in the window makes every rank raise.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/debug.hpp"
#include "gather_check.hpp"
#include "topology/topology.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::expected_value;
using testing::input_value;
using testing::run_ranks;

constexpr int64_t kLarge = 100000;  // 400 KB of float32 per rank: past the eager limit

// One gather into `out` (from empty() or not), every element checked; the output starts with
// values that differ from every expected one.
void gather_into(Tensor& out, const Group& g, int64_t n, DType in_dt, int iter,
                 bool in_place = false) {
  const int p = g.is_default() ? get_world_size() : g.size();
  const int me = g.is_default() ? get_rank() : g.rank();
  const DType out_dt = out.dtype();
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < n; ++i)
      out.set(r * n + i, expected_value(r, i, iter, in_dt, out_dt) + 1);
  Tensor in = in_place ? Tensor::view(static_cast<uint8_t*>(out.data()) + me * n * 4, out_dt, {n})
                       : zeros({n}, in_dt);
  for (int64_t i = 0; i < n; ++i)
    in.set(i, input_value(me, i, iter, in_dt));
  all_gather_into_tensor(out, in, g);
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double want = expected_value(r, i, iter, in_dt, out_dt);
      RANK_CHECK(out.item(r * n + i) == want, "iter " << iter << " chunk " << r << " element " << i
                                                      << ": got " << out.item(r * n + i)
                                                      << ", want " << want);
    }
  }
}

// What the transport moved: bytes written to peers and bytes read out of their memory.
uint64_t bytes_moved() {
  uint64_t n = detail::bytes_read();
  for (int r = 0; r < get_world_size(); ++r)
    n += detail::bytes_written_to(r);
  return n;
}

// Out of place, in place, int64 into float32, flat and stacked, ten calls in a row: every
// chunk right, and not one byte through the transport's writes.
TEST(SymmetricMemory, AllGatherStoresEveryChunkIntoEveryMembersOutput) {
  expect_all_ok(run_ranks(3, [](int, int p) {
    Tensor flat = empty({p * kLarge}, DType::Float32);
    Tensor stacked = empty({p, kLarge}, DType::Float32);
    const uint64_t before = bytes_moved();
    for (int iter = 0; iter < 10; ++iter) {
      gather_into(iter % 2 ? stacked : flat, {}, kLarge, DType::Float32, iter);
    }
    gather_into(flat, {}, kLarge, DType::Int64, 10);
    gather_into(flat, {}, kLarge, DType::Float32, 11, true);
    // Small chunks keep riding inline in the descriptors.
    Tensor small = empty({p * 8}, DType::Float32);
    gather_into(small, {}, 8, DType::Float32, 12);
    RANK_CHECK(bytes_moved() == before,
               "the symmetric path moved " << bytes_moved() - before << " bytes");
    // The same gather into ordinary memory goes through the transport.
    Tensor plain = zeros({p * kLarge}, DType::Float32);
    gather_into(plain, {}, kLarge, DType::Float32, 13);
    RANK_CHECK(bytes_moved() > before, "the ordinary path moved nothing");
  }));
}

// A group whose members are not the world's first; tensors dropped and made again.
TEST(SymmetricMemory, OnASubgroupAndAcrossTensorsMadeAndDropped) {
  expect_all_ok(run_ranks(4, [](int rank, int) {
    Group g = new_group({3, 1, 2});
    if (!g.is_member()) return;
    for (int round = 0; round < 3; ++round) {
      Tensor out = empty({3 * kLarge}, DType::Float32, g);
      gather_into(out, g, kLarge, DType::Float32, round);
    }
    (void)rank;
  }));
}

// Rank 1 gathers into ordinary memory while the others use the window: every rank raises the
// same error before anything is stored, and the group goes on.
// Past the eager limit, and from 1 KiB within it, where the window's stores beat the inline
// path: a member whose output is elsewhere is found, not silently gathered around.
TEST(SymmetricMemory, AMemberWhoseOutputIsNotInTheWindowMakesEveryRankRaise) {
  expect_all_ok(run_ranks(3, [](int rank, int p) {
    int iter = 0;
    for (int64_t n : {kLarge, int64_t{256}, int64_t{1024}}) {
      Tensor sym = empty({p * n}, DType::Float32);
      Tensor plain = zeros({p * n}, DType::Float32);
      Tensor& out = rank == 1 ? plain : sym;
      Tensor in = zeros({n}, DType::Float32);
      expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in); },
                                         "ranks disagree on symmetric memory");
      gather_into(sym, {}, n, DType::Float32, iter++);
    }
  }));
}

// Chunks from 1 KiB to the eager limit take the window too: every element right out of place,
// in place and with a conversion, and nothing through the transport's writes.
TEST(SymmetricMemory, ChunksFrom1KiBWithinTheEagerLimitAreStoredThroughTheWindow) {
  expect_all_ok(run_ranks(2, [](int, int p) {
    const uint64_t before = bytes_moved();
    int iter = 0;
    for (int64_t n : {int64_t{255}, int64_t{256}, int64_t{1024}, int64_t{4096}, int64_t{16384}}) {
      Tensor out = empty({p * n}, DType::Float32);
      gather_into(out, {}, n, DType::Float32, iter++);
      gather_into(out, {}, n, DType::Float32, iter++, true);
      gather_into(out, {}, n, DType::Int64, iter++);
    }
    RANK_CHECK(bytes_moved() == before,
               "the symmetric path wrote " << bytes_moved() - before << " bytes");
  }));
}

// A chunk past 2 MiB is stored block by block into every member's output: every element right,
// with a length that is no multiple of the block, in place and converted from int64.
TEST(SymmetricMemory, ChunksPastTheCacheAreStoredBlockByBlockIntoEveryMember) {
  expect_all_ok(run_ranks(2, [](int, int p) {
    constexpr int64_t n = (2 << 20) / 4 + 1234;
    Tensor out = empty({p * n}, DType::Float32);
    gather_into(out, {}, n, DType::Float32, 0);
    gather_into(out, {}, n, DType::Float32, 1, true);
    gather_into(out, {}, n, DType::Int64, 2);
  }));
}

// Where the members' outputs together pass this host's last-level cache, each chunk goes into
// every output with non-temporal stores (common/stream_copy.hpp): every element right, with a
// length that is no multiple of a cache line or a block, out of place and in place.
TEST(SymmetricMemory, ChunksWhoseOutputsPassTheLastLevelCacheAreStreamedIntoEveryMember) {
  const size_t cache = topology::probe().cache_bytes;
  if (cache == 0 || cache > (256u << 20)) GTEST_SKIP() << "last-level cache: " << cache << " bytes";
  expect_all_ok(run_ranks(2, [cache](int, int p) {
    const int64_t n = static_cast<int64_t>(cache / (p * p) / 4) + 1237;  // float32
    Tensor out = empty({p * n}, DType::Float32);
    gather_into(out, {}, n, DType::Float32, 0);
    gather_into(out, {}, n, DType::Float32, 1, true);
  }));
}

// all_reduce in place on a tensor from empty(): every op and a few dtypes, a length the ranks
// do not divide, bitwise equal to the same all_reduce on ordinary memory, and not one byte
// through the transport's writes.
TEST(SymmetricMemory, AllReduceFoldsEachSegmentOnceAndStoresItEverywhere) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    const int64_t n = kLarge + 1;
    struct Case {
      DType dt;
      ReduceOp op;
    };
    const Case cases[] = {{DType::Float32, ReduceOp::Sum},
                          {DType::Int64, ReduceOp::Max},
                          {DType::Float16, ReduceOp::Avg},
                          {DType::Int32, ReduceOp::Product},
                          {DType::BFloat16, ReduceOp::Min}};
    int iter = 0;
    for (const Case& c : cases) {
      Tensor sym = empty({n}, c.dt);
      Tensor plain = zeros({n}, c.dt);
      for (int64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>((rank * 3 + i * 7 + iter) % 5 + 1);
        sym.set(i, v);
        plain.set(i, v);
      }
      const uint64_t before = bytes_moved();
      all_reduce(sym, c.op);
      RANK_CHECK(bytes_moved() == before, "the symmetric all_reduce wrote through the transport");
      all_reduce(plain, c.op);
      for (int64_t i = 0; i < n; ++i) {
        RANK_CHECK(sym.item(i) == plain.item(i), dtype_name(c.dt)
                                                     << " element " << i << ": " << sym.item(i)
                                                     << " vs " << plain.item(i));
      }
      ++iter;
    }
    // One rank's tensor in ordinary memory: every rank raises, and the group goes on.
    Tensor sym = empty({n}, DType::Float32);
    Tensor plain = zeros({n}, DType::Float32);
    Tensor& mine = rank == 2 ? plain : sym;
    expect_throw_with<InvalidArgument>([&] { all_reduce(mine); }, "ranks disagree");
    for (int64_t i = 0; i < n; ++i)
      sym.set(i, rank + 1);
    all_reduce(sym);
    for (int64_t i = 0; i < n; ++i)
      RANK_CHECK(sym.item(i) == 6, "after the error, element " << i << " is " << sym.item(i));
  }));
}

// reduce_scatter_tensor whose input comes from empty(): every op across dtypes, out of place and
// with the output our own piece of the input, bitwise equal to the ordinary path, not one byte
// through the transport's writes, and the inputs still intact afterwards (nobody stores into a
// peer).
TEST(SymmetricMemory, ReduceScatterFoldsEachPieceStraightOutOfEveryMembersInput) {
  expect_all_ok(run_ranks(3, [](int rank, int p) {
    const int64_t n = kLarge / 3 + 1;
    struct Case {
      DType dt;
      ReduceOp op;
      bool in_place;
    };
    const Case cases[] = {{DType::Float32, ReduceOp::Sum, false},
                          {DType::Int64, ReduceOp::Max, false},
                          {DType::Float16, ReduceOp::Avg, true},
                          {DType::Int32, ReduceOp::Product, false},
                          {DType::BFloat16, ReduceOp::Min, true}};
    int iter = 0;
    for (const Case& c : cases) {
      Tensor sym = empty({p * n}, c.dt);
      Tensor plain = zeros({p * n}, c.dt);
      auto value = [&](int64_t i) {
        return static_cast<double>((rank * 3 + i * 7 + iter) % 5 + 1);
      };
      for (int64_t i = 0; i < p * n; ++i) {
        sym.set(i, value(i));
        plain.set(i, value(i));
      }
      Tensor out =
          c.in_place
              ? Tensor::view(static_cast<uint8_t*>(sym.data()) + rank * n * element_size(c.dt),
                             c.dt, {n})
              : zeros({n}, c.dt);
      Tensor want = zeros({n}, c.dt);
      const uint64_t before = bytes_moved();
      reduce_scatter_tensor(out, sym, c.op);
      RANK_CHECK(bytes_moved() == before,
                 "the symmetric reduce_scatter wrote through the transport");
      reduce_scatter_tensor(want, plain, c.op);
      for (int64_t i = 0; i < n; ++i) {
        RANK_CHECK(out.item(i) == want.item(i), dtype_name(c.dt)
                                                    << " element " << i << ": " << out.item(i)
                                                    << " vs " << want.item(i));
      }
      for (int64_t i = 0; i < p * n; ++i) {
        if (c.in_place && i / n == rank) continue;
        RANK_CHECK(sym.item(i) == value(i), "input element " << i << " changed to " << sym.item(i));
      }
      ++iter;
    }
    // One rank's input in ordinary memory: every rank raises, and the group goes on.
    Tensor sym = empty({p * n}, DType::Float32);
    Tensor plain = zeros({p * n}, DType::Float32);
    Tensor out = zeros({n}, DType::Float32);
    expect_throw_with<InvalidArgument>([&] { reduce_scatter_tensor(out, rank == 0 ? plain : sym); },
                                       "ranks disagree");
    for (int64_t i = 0; i < p * n; ++i)
      sym.set(i, rank + 1 + i / n);
    reduce_scatter_tensor(out, sym);
    for (int64_t i = 0; i < n; ++i) {
      RANK_CHECK(out.item(i) == 6 + 3 * rank,
                 "after the error, element " << i << " is " << out.item(i));
    }
  }));
}

// A tensor every member dropped comes back to the group's pool: the next empty() of a size
// that fits takes its memory again (one round, nothing mapped), cleared for empty() and as it
// was for empty_uninitialized(). A tensor one member still holds is never handed out again, and
// every gather into what comes back is right.
TEST(SymmetricMemory, MemoryEveryMemberDroppedIsReusedAndMemoryOneHoldsIsNot) {
  expect_all_ok(run_ranks(3, [](int rank, int p) {
    const void* first = nullptr;
    {
      Tensor a = empty({p * kLarge}, DType::Float32);
      first = a.data();
      gather_into(a, {}, kLarge, DType::Float32, 0);
    }
    Tensor b = empty({p * kLarge}, DType::Float32);
    RANK_CHECK(b.data() == first, "a dropped window was not reused");
    for (int64_t i = 0; i < p * kLarge; ++i)
      RANK_CHECK(b.item(i) == 0, "empty() reused a window without clearing element " << i);
    gather_into(b, {}, kLarge, DType::Float32, 1);
    const double kept = b.item(5);
    b = Tensor();
    Tensor c = empty_uninitialized({p * kLarge - 7}, DType::Float32);  // fits the same window
    RANK_CHECK(c.data() == first, "empty_uninitialized did not reuse the window");
    RANK_CHECK(c.item(5) == kept, "empty_uninitialized changed the reused bytes");
    // Rank 1 keeps c: nobody may get its window back.
    if (rank != 1) c = Tensor();
    Tensor d = empty({p * kLarge}, DType::Float32);
    RANK_CHECK(d.data() != first, "a window rank 1 still holds was handed out again");
    gather_into(d, {}, kLarge, DType::Float32, 2);
    c = Tensor();
    Tensor e = empty({p * kLarge}, DType::Float32);
    RANK_CHECK(e.data() == first, "the window every member dropped at last was not reused");
    gather_into(e, {}, kLarge, DType::Float32, 3);
  }));
}

// broadcast of a tensor from empty(): every member copies it straight out of the root's part,
// for every root and a few dtypes, every element right, not one byte through the transport's
// writes; one member's tensor in ordinary memory makes every member raise, and the group goes on.
TEST(SymmetricMemory, BroadcastCopiesStraightOutOfTheRootsPart) {
  expect_all_ok(run_ranks(3, [](int rank, int p) {
    const int64_t n = kLarge + 3;
    int iter = 0;
    for (DType dt : {DType::Float32, DType::Int64, DType::BFloat16}) {
      for (int root = 0; root < p; ++root, ++iter) {
        Tensor t = empty({n}, dt);
        const auto value = [&](int64_t i) { return static_cast<double>((i * 5 + iter) % 7 + 1); };
        for (int64_t i = 0; i < n; ++i)
          t.set(i, rank == root ? value(i) : -1);
        const uint64_t before = bytes_moved();
        broadcast(t, root);
        RANK_CHECK(bytes_moved() == before, "the symmetric broadcast wrote through the transport");
        for (int64_t i = 0; i < n; ++i) {
          RANK_CHECK(t.item(i) == value(i), dtype_name(dt)
                                                << " root " << root << " element " << i << ": "
                                                << t.item(i) << ", want " << value(i));
        }
      }
    }
    Tensor sym = empty({n}, DType::Float32);
    Tensor plain = zeros({n}, DType::Float32);
    Tensor& mine = rank == 1 ? plain : sym;
    expect_throw_with<InvalidArgument>([&] { broadcast(mine, 0); }, "ranks disagree");
    for (int64_t i = 0; i < n; ++i)
      sym.set(i, rank == 2 ? 9 : 0);
    broadcast(sym, 2);
    for (int64_t i = 0; i < n; ++i)
      RANK_CHECK(sym.item(i) == 9, "after the error, element " << i << " is " << sym.item(i));
  }));
}

// A shape one member gets wrong raises on every member (not a wait for the timeout), and the
// group makes windows afterwards.
TEST(SymmetricMemory, AShapeOneMemberGetsWrongRaisesOnEveryMember) {
  expect_all_ok(run_ranks(3, [](int rank, int p) {
    const std::vector<int64_t> sizes =
        rank == 2 ? std::vector<int64_t>{-2, -3} : std::vector<int64_t>{p * kLarge};
    expect_throw_with<InvalidArgument>([&] { (void)empty(sizes, DType::Float32); },
                                       rank == 2 ? "negative size" : "rank 2");
    Tensor out = empty({p * kLarge}, DType::Float32);
    gather_into(out, {}, kLarge, DType::Float32, 0);
  }));
}

// Members that ask for different tensors (another size, the same size in another shape,
// another dtype; zero bytes too, which skips the offers of dropped windows) raise on every
// member under empty()'s own name, naming each member's ask, where each once kept memory of
// its own without a word; the group makes windows afterwards.
TEST(SymmetricMemory, MembersThatAskForDifferentTensorsRaiseOnEveryMember) {
  expect_all_ok(run_ranks(2, [](int rank, int p) {
    struct Case {
      std::vector<int64_t> mine, theirs;
      DType my_dtype, their_dtype;
      const char* said;
    };
    for (const Case& c :
         {Case{{4, 2},
               {4, 3},
               DType::Float32,
               DType::Float32,
               "rank 0 (4, 2) torch.float32, rank 1 (4, 3) torch.float32"},
          Case{{8},
               {2, 4},
               DType::Float32,
               DType::Float32,
               "rank 0 (8,) torch.float32, rank 1 (2, 4) torch.float32"},
          Case{{kLarge}, {kLarge}, DType::Float32, DType::Int32, "torch.int32"},
          Case{{0}, {0, 2}, DType::Float32, DType::Float32, "rank 1 (0, 2) torch.float32"}}) {
      const auto& sizes = rank == 1 ? c.theirs : c.mine;
      const DType dt = rank == 1 ? c.their_dtype : c.my_dtype;
      expect_throw_with<InvalidArgument>([&] { (void)empty(sizes, dt); }, c.said);
      expect_throw_with<InvalidArgument>([&] { (void)empty(sizes, dt); },
                                         "empty (group 0 (ranks [0, 1])): the members ask for "
                                         "different tensors");
    }
    Tensor out = empty({p * kLarge}, DType::Float32);
    gather_into(out, {}, kLarge, DType::Float32, 0);
  }));
}

}  // namespace
}  // namespace rdmacoll
