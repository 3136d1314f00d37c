// The verbs test list, run inside the SoftRoCE VM (tests/softroce/run-suite.sh) with
// RDMACOLL_TRANSPORT=verbs: real libibverbs against rdma_rxe. Sizes stay at MiB scale because
// SoftRoCE under TCG moves a few MB/s.
// This file: group sizes, connections, registrations and the collectives' paths; the write
// ring in verbs_eager_test.cpp, point-to-point and the rooted collectives in
// verbs_p2p_test.cpp, flow control and failures in verbs_failure_test.cpp.

#include <gtest/gtest.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

#include "reduce_check.hpp"
#include "transport/verbs/footprint.hpp"
#include "verbs_common.hpp"

namespace rdmacoll {
namespace {

class VerbsGroupSize : public ::testing::TestWithParam<int> {};

TEST_P(VerbsGroupSize, OneElementToOneMiBFlatAndStacked) {
  expect_all_ok(run_ranks(GetParam(), [](int, int) {
    require_verbs();
    gather_and_check({}, 1, DType::Float32, DType::Float32, false);
    gather_and_check({}, 13, DType::Int8, DType::Int8, true);
    gather_and_check({}, 1001, DType::Int64, DType::Float32, false);
    gather_and_check({}, 16384, DType::Float32, DType::Float32, true);           // 64 KiB
    gather_and_check({}, (1 << 20) / 4, DType::Float32, DType::Float32, false);  // 1 MiB
  }));
}

INSTANTIATE_TEST_SUITE_P(Verbs, VerbsGroupSize, ::testing::Values(2, 3, 4));

// Rank 1 brings its QP to RTS 1 s after it has rank 0's QP number (a test hook), while rank
// 0's is ready at once. Rank 0 must not send into a QP still in RESET or INIT: that SEND is
// dropped without a NAK and retried only after the QP timeout (4.3 s here). With the "up"
// handshake through the store rank 0 waits for rank 1 instead, and the call takes about the
// delay, not the delay plus a retry.
TEST(Verbs, LateQpTransitionsDoNotStallTheFirstCall) {
  using std::chrono::milliseconds;
  using std::chrono::steady_clock;
  RunOptions opt;
  opt.env = {{"RDMACOLL_TEST_QP_DELAY_MS", "1000"}, {"RDMACOLL_TEST_QP_DELAY_RANK", "1"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        require_verbs();
        const auto t1 = steady_clock::now();
        gather_and_check({}, 1024, DType::Float32, DType::Float32, false);
        const auto first =
            std::chrono::duration_cast<milliseconds>(steady_clock::now() - t1).count();
        std::printf("rank %d: first call %lld ms\n", rank, static_cast<long long>(first));
        RANK_CHECK(first >= 1000,
                   "the first call took " << first << " ms: nobody waited for rank 1");
        RANK_CHECK(first < 3500, "the first call took " << first << " ms: a QP retry stall");
      },
      opt));
}

// torch's DataLoader forks workers that touch heap objects sharing pages with registered
// tensors. Where ibv_fork_init() has marked those pages MADV_DONTFORK they are missing in the
// child, which crashes; this kernel (6.1) needs no fork init, so the library must not call it.
TEST(Verbs, ForkedChildTouchesHeapNextToARegisteredTensor) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    const int64_t n = 1024;  // 4 KiB per rank: above the inline limit, so the data path registers
    // One heap block: a neighbour, the output tensor, a neighbour; they share pages.
    std::vector<float> heap(static_cast<size_t>(world * n) + 2 * 256, 0.0f);
    float* before = heap.data();
    float* data = heap.data() + 256;
    float* after = data + world * n;
    Tensor in = zeros({n}, DType::Float32);
    Tensor out = Tensor::view(data, DType::Float32, {world * n});
    testing::fill_input(in, rank, 0);
    all_gather_into_tensor(out, in);
    testing::check_gathered(out, world, 0, DType::Float32);
    before[0] = 1.0f;
    after[0] = 2.0f;
    const pid_t child = ::fork();
    if (child == 0) {
      // The child reads and writes the neighbours and the tensor, then exits without cleanup.
      double sum = 0;
      for (float v : heap)
        sum += v;
      before[1] = 3.0f;
      after[1] = 4.0f;
      data[0] += 1.0f;
      ::_exit(before[0] == 1.0f && after[0] == 2.0f && sum != 0 ? 0 : 3);
    }
    RANK_CHECK(child > 0, "fork failed");
    int status = 0;
    RANK_CHECK(::waitpid(child, &status, 0) == child, "waitpid failed");
    RANK_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the forked child "
                   << (WIFSIGNALED(status) ? "died of signal " : "exited with ")
                   << (WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status)));
    // The parent's registration still receives the peers' writes.
    for (int iter = 1; iter < 4; ++iter) {
      std::fill(data, data + world * n, -1.0f);
      testing::fill_input(in, rank, iter);
      all_gather_into_tensor(out, in);
      testing::check_gathered(out, world, iter, DType::Float32);
    }
    RANK_CHECK(before[0] == 1.0f && after[0] == 2.0f && before[1] == 0.0f,
               "the parent's neighbours changed");
  }));
}

// What a call costs the NIC and the kernel: work requests, doorbells, completions and
// event-fd reads per call, and the wall time, at three sizes (printed for the notes). The
// results are checked; so is that no call needs more doorbells than work requests.
TEST(Verbs, PerCallCounters) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    for (int64_t n : {int64_t{2}, int64_t{16384}, int64_t{262144}}) {  // 8 B, 64 KiB, 1 MiB
      Tensor in = zeros({n}, DType::Float32);
      Tensor out = zeros({world * n}, DType::Float32);
      all_gather_into_tensor(out, in);  // registers; not counted
      barrier();
      const std::string before = detail::transport_counters();
      const int calls = n > 100000 ? 20 : 100;
      const auto t0 = std::chrono::steady_clock::now();
      for (int iter = 0; iter < calls; ++iter) {
        testing::fill_input(in, rank, iter);
        all_gather_into_tensor(out, in);
        testing::check_gathered(out, world, iter, DType::Float32);
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          calls;
      const std::string after = detail::transport_counters();
      // name=value pairs: print the difference per call.
      std::istringstream b(before), a(after);
      std::string tb, ta;
      std::ostringstream line;
      double wrs = 0, bells = 0;
      while (b >> tb && a >> ta) {
        const auto eq = ta.find('=');
        const std::string name = ta.substr(0, eq);
        const double d = (std::stod(ta.substr(eq + 1)) - std::stod(tb.substr(eq + 1))) / calls;
        line << ' ' << name << '=' << d;
        if (name == "work_requests") wrs = d;
        if (name == "doorbells") bells = d;
      }
      std::printf("rank %d, %lld B per rank, %.0f us per call, per call:%s\n", rank,
                  static_cast<long long>(n * 4), us, line.str().c_str());
      RANK_CHECK(bells <= wrs, "more doorbells than work requests");
      // With RDMACOLL_IB_ADAPTIVE_ROUTING=1 every write ends with its zero-byte immediate.
      const char* ar = std::getenv("RDMACOLL_IB_ADAPTIVE_ROUTING");
      if (ar && std::string(ar) == "1" && n * 4 > 65536) {
        RANK_CHECK(line.str().find(" ordering_writes=0 ") == std::string::npos,
                   "no ordering write with RDMACOLL_IB_ADAPTIVE_ROUTING=1:" << line.str());
      }
    }
  }));
}

// RDMACOLL_IB_QPS_PER_PEER=3 with 4 KiB pieces: a write of several pieces is dealt over three
// QPs, each ending with its own immediate, and the receiver completes after one arrival per QP
// used. Sizes straddle the piece and lane counts (1, 2, 3, 16 and 65 pieces, a short last one);
// every collective's every element is checked, and the counter proves the striping happened.
TEST(Verbs, StripedWritesOverThreeQpsPerPeer) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_IB_QPS_PER_PEER", "3"}, {"RDMACOLL_IB_CHUNK", "4096"}};
  expect_all_ok(run_ranks(
      3,
      [](int, int) {
        require_verbs();
        using namespace testing::reduction;
        for (int64_t n :
             {int64_t{1}, int64_t{2048}, int64_t{3000}, int64_t{16384}, int64_t{66000}}) {
          gather_and_check({}, n, DType::Float32, DType::Float32, n % 2 == 0);
        }
        reduce_scatter_and_check({}, 12288, DType::Float32, ReduceOp::Sum, 1, Layout::Stacked);
        broadcast_and_check({}, 2, 40000, DType::Float32, 1);
        broadcast_and_check({}, 0, 100001, DType::Float32, 2);
        const std::string counters = detail::transport_counters();
        const auto at = counters.find("striped_writes=");
        RANK_CHECK(at != std::string::npos && std::stoull(counters.substr(at + 15)) > 0,
                   "no write was striped: " << counters);
      },
      opt));
}

// Ranks that disagree on the QP count cannot pair their QPs: every rank refuses at init,
// naming the setting.
TEST(Verbs, QpsPerPeerMismatchIsRefusedOnEveryRank) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        ::setenv("RDMACOLL_IB_QPS_PER_PEER", rank == 0 ? "1" : "2", 1);
        expect_throw_with<Error>(
            [] { init_process_group(); },
            "ranks disagree on RDMACOLL_IB_QPS_PER_PEER (rank 0 '1', rank 1 '2')");
      },
      opt));
}

std::string planned_footprint(uint64_t peers, uint64_t world) {
  const auto want =
      transport::verbs_plan::plan(peers, 1, transport::eager_ring::kDefaultSlots, world - 1);
  std::ostringstream os;
  os << "queue_pairs=" << want.queue_pairs << " pinned_control_bytes=" << want.pinned_control_bytes
     << " cq_entries=" << want.cq_entries;
  return os.str();
}

// The live transport holds what the footprint plan says (src/transport/verbs/footprint.hpp): no
// QP before the first call, then one per peer the calls touched (here every peer: one host
// runs direct schedules), the shared receive and send buffers, the CQ sized at init.
TEST(Verbs, FootprintMatchesThePlan) {
  for (int world : {2, 4}) {
    expect_all_ok(run_ranks(world, [](int, int p) {
      require_verbs();
      const uint64_t w = static_cast<uint64_t>(p);
      std::string live = detail::transport_footprint();
      RANK_CHECK(live == planned_footprint(0, w), "before any call: " << live);
      RANK_CHECK(detail::connected_peers() == 0, detail::connected_peers() << " peers at init");
      gather_and_check({}, 1001, DType::Float32, DType::Float32, false);
      live = detail::transport_footprint();
      std::printf("%d ranks: %s\n", p, live.c_str());
      RANK_CHECK(live == planned_footprint(w - 1, w),
                 "footprint " << live << ", plan " << planned_footprint(w - 1, w));
      RANK_CHECK(detail::connected_peers() == w - 1, detail::connected_peers() << " peers");
    }));
  }
}

// QPs on demand: 8 ranks, each its own host, connect only the peers their schedules touch
// (recursive doubling's, rank xor 2^k, for the descriptors and the data): log2 8 = 3 of the 7
// (the bound is 2 ceil(log2 p)), and the live footprint is the plan for that many.
TEST(Verbs, EightHostsConnectOnlyTheirSchedulePeers) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      8,
      [](int rank, int p) {
        init_as_own_host(rank);
        require_verbs();
        RANK_CHECK(detail::connected_peers() == 0, detail::connected_peers() << " peers at init");
        for (int i = 0; i < 3; ++i) {
          gather_and_check({}, 2, DType::Int32, DType::Int32, false);          // 8 B: inline
          gather_and_check({}, 16384, DType::Float32, DType::Float32, false);  // 64 KiB
        }
        const uint64_t peers = detail::connected_peers();
        const std::string live = detail::transport_footprint();
        std::printf("rank %d of %d hosts: %llu peers connected, %s\n", rank, p,
                    static_cast<unsigned long long>(peers), live.c_str());
        RANK_CHECK(peers == 3, peers << " peers connected");
        RANK_CHECK(live == planned_footprint(peers, static_cast<uint64_t>(p)),
                   "footprint " << live << ", plan " << planned_footprint(peers, p));
        destroy_process_group();
      },
      opt));
}

TEST(Verbs, Subgroup) {
  expect_all_ok(run_ranks(3, [](int rank, int) {
    require_verbs();
    Group g = new_group({0, 2});
    if (g.is_member()) gather_and_check(g, 100, DType::Float64, DType::Float64, false);
    gather_and_check({}, 5, DType::Int32, DType::Int32, false);
    (void)rank;
  }));
}

TEST(Verbs, HundredCallsOnReusedBuffersHitTheRegistrationCache) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    const int64_t n = 4096;  // 16 KiB: above the inline limit, so the data path registers
    Tensor in = zeros({n}, DType::Float32);
    Tensor out = zeros({world * n}, DType::Float32);
    all_gather_into_tensor(out, in);
    const uint64_t before = detail::memory_registrations();
    RANK_CHECK(before > 0, "the first call registered nothing");
    for (int iter = 0; iter < 100; ++iter) {
      testing::fill_input(in, rank, iter);
      all_gather_into_tensor(out, in);
      testing::check_gathered(out, world, iter, DType::Float32);
    }
    RANK_CHECK(
        detail::memory_registrations() == before,
        "registered " << detail::memory_registrations() - before << " times for reused buffers");
  }));
}

// The own chunk goes to the peers straight from the registered input while it is copied into
// the output; an input the NIC cannot register (pages mapped read-only: registration asks for
// local write) is copied first instead, and the call is as right either way.
TEST(Verbs, AReadOnlyInputIsGatheredAsAnyOther) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    require_verbs();
    const int64_t n = 8192;  // 32 KiB: above the inline limit
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    void* page = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    RANK_CHECK(page != MAP_FAILED, "mmap failed");
    Tensor out = zeros({world * n}, DType::Float32);
    for (int iter = 0; iter < 3; ++iter) {
      RANK_CHECK(::mprotect(page, bytes, PROT_READ | PROT_WRITE) == 0, "mprotect failed");
      Tensor in = Tensor::view(page, DType::Float32, {n});
      testing::fill_input(in, rank, iter);
      RANK_CHECK(::mprotect(page, bytes, PROT_READ) == 0, "mprotect failed");
      all_gather_into_tensor(out, in);
      testing::check_gathered(out, world, iter, DType::Float32);
      Tensor writable = zeros({n}, DType::Float32);  // and a registrable one, alternately
      testing::fill_input(writable, rank, iter);
      all_gather_into_tensor(out, writable);
      testing::check_gathered(out, world, iter, DType::Float32);
    }
    ::munmap(page, bytes);
  }));
}

// Fresh mappings each call, often at the address just unmapped: a stale registration would
// point the peer's write at the old pages and the check would see the sentinel.
// Fresh mappings, usually at the address just unmapped: a stale cached registration would make
// the peers' writes land in the old pages. Run with UCX's memory events (the cache drops what
// munmap reports) and without them (UCX_MEM_EVENTS=no: the cache must then be off).
class VerbsMemoryEvents : public ::testing::TestWithParam<bool> {};

TEST_P(VerbsMemoryEvents, HundredCallsOnFreshlyMappedBuffers) {
  RunOptions opt;
  if (!GetParam()) opt.env = {{"UCX_MEM_EVENTS", "no"}};
  const bool events = GetParam();
  expect_all_ok(run_ranks(
      2,
      [events](int rank, int world) {
        require_verbs();
        const int64_t n = 4096;
        const size_t bytes = static_cast<size_t>(world * n) * 4;
        const uint64_t registered = detail::memory_registrations();
        for (int iter = 0; iter < 100; ++iter) {
          void* p =
              ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          RANK_CHECK(p != MAP_FAILED, "mmap");
          Tensor out = Tensor::view(p, DType::Float32, {world * n});
          for (int64_t i = 0; i < out.numel(); ++i)
            out.set(i, -1);
          Tensor in = zeros({n}, DType::Float32);
          testing::fill_input(in, rank, iter);
          all_gather_into_tensor(out, in);
          testing::check_gathered(out, world, iter, DType::Float32);
          ::munmap(p, bytes);
        }
        // Without events the cache is off: each call registers its output afresh.
        const uint64_t made = detail::memory_registrations() - registered;
        if (!events) RANK_CHECK(made >= 100, "only " << made << " registrations in 100 calls");
      },
      opt));
}

INSTANTIATE_TEST_SUITE_P(Verbs, VerbsMemoryEvents, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Events" : "NoEvents"; });

// A 4 MiB output freed and malloc'ed again at the same address (glibc's mmap threshold held at
// 128 KiB, as for a large tensor that torch's CPU allocator frees): glibc unmaps it inside
// free(), and the registration cache must see that unmap, or the peer's writes for the new
// output go through the old registration into pages that are gone and the sentinels stay. With
// ucm's "reloc" hooks, which see a munmap called through our library's PLT but not glibc's own
// inside free(), the transport's probe must find that out and turn the cache off.
class VerbsFreedOutput : public ::testing::TestWithParam<const char*> {};

TEST_P(VerbsFreedOutput, AReallocatedOutputAtTheSameAddressIsWrittenRight) {
  RunOptions opt;
  // ucm's own malloc (UCX_MEM_MALLOC_HOOKS) raises events from free() whatever the mode: off.
  opt.env = {{"UCX_MEM_MMAP_HOOK_MODE", GetParam()}, {"UCX_MEM_MALLOC_HOOKS", "no"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int world) {
        require_verbs();
        ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);  // fixed: no dynamic threshold
        const int64_t n = (int64_t{4} << 20) / 4 / world;
        const size_t bytes = static_cast<size_t>(world * n) * 4;
        std::set<void*> seen;
        int reused = 0;
        for (int iter = 0; iter < 6; ++iter) {
          void* p = std::malloc(bytes);
          RANK_CHECK(p != nullptr, "malloc");
          reused += seen.count(p) ? 1 : 0;
          seen.insert(p);
          Tensor out = Tensor::view(p, DType::Float32, {world * n});
          for (int64_t i = 0; i < out.numel(); ++i)
            out.set(i, -1);
          Tensor in = zeros({n}, DType::Float32);
          testing::fill_input(in, rank, iter);
          all_gather_into_tensor(out, in);
          testing::check_gathered(out, world, iter, DType::Float32);
          std::free(p);
        }
        // Else nothing here tested an address that came back.
        RANK_CHECK(reused > 0, "malloc never returned a freed output's address again");
      },
      opt));
}

INSTANTIATE_TEST_SUITE_P(Verbs, VerbsFreedOutput, ::testing::Values("bistro", "reloc"),
                         [](const auto& info) { return std::string(info.param); });

// Another thread allocating and freeing mmap-sized blocks fires UCX's unmap hook inside
// glibc's free (arena lock held) while this thread registers buffers: the hook only records
// ranges, so neither thread can block the other (it did when the hook deregistered under the
// cache's mutex).
TEST(Verbs, MallocAndFreeOnAnotherThreadBesideCollectives) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    std::atomic<bool> stop{false};
    std::thread churn([&] {
      while (!stop.load()) {
        auto* p = static_cast<volatile char*>(std::malloc(512 * 1024));  // above mmap threshold
        if (p) p[0] = 1;
        std::free(const_cast<char*>(p));
      }
    });
    const int64_t n = 4096;
    for (int iter = 0; iter < 50; ++iter) {
      Tensor in = zeros({n}, DType::Float32);  // fresh buffers: registrations and unmaps
      Tensor out = zeros({world * n}, DType::Float32);
      testing::fill_input(in, rank, iter);
      all_gather_into_tensor(out, in);
      testing::check_gathered(out, world, iter, DType::Float32);
    }
    stop = true;
    churn.join();
  }));
}

// all_reduce's rounds write segments of buffers an earlier round or call registered: after the
// first call, further calls on the same tensor register nothing (the cache serves contained
// ranges), and every element is still right.
TEST(Verbs, AllReduceRoundsHitTheRegistrationCache) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    require_verbs();
    const int64_t n = 65536;  // 256 KiB: the reduce-scatter and all-gather rounds register
    Tensor t = zeros({n});
    uint64_t after_first = 0;
    for (int iter = 0; iter < 5; ++iter) {
      for (int64_t i = 0; i < n; ++i)
        t.set(i, rank * 10 + (i + iter) % 7);
      all_reduce(t);
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int r = 0; r < world; ++r)
          want += r * 10 + (i + iter) % 7;
        RANK_CHECK(t.item(i) == want, "iter " << iter << " element " << i);
      }
      if (iter == 0) after_first = detail::memory_registrations();
    }
    RANK_CHECK(detail::memory_registrations() == after_first,
               "calls after the first registered " << detail::memory_registrations() - after_first
                                                   << " times");
  }));
}

TEST(Verbs, MismatchedSizesRaiseOnEveryRank) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    require_verbs();
    const int64_t n = rank == 1 ? 3 : 2;
    Tensor in = zeros({n}), out = zeros({world * n});
    expect_throw_with<InvalidArgument>([&] { all_gather_into_tensor(out, in); }, "disagree");
    gather_and_check({}, 4, DType::Float32, DType::Float32, false);
  }));
}

// all_reduce rides the same gathers: small (inline in the descriptors) and 256 KiB (RDMA writes).
TEST(Verbs, AllReduceSmallAndLarge) {
  expect_all_ok(run_ranks(3, [](int rank, int world) {
    require_verbs();
    for (int64_t n : {int64_t{5}, int64_t{65536}}) {
      Tensor t = zeros({n});
      for (int64_t i = 0; i < n; ++i)
        t.set(i, rank * 10 + i % 7);
      all_reduce(t);
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int r = 0; r < world; ++r)
          want += r * 10 + i % 7;
        RANK_CHECK(t.item(i) == want, "n " << n << " element " << i << ": got " << t.item(i));
      }
    }
  }));
}

// reduce_scatter_tensor: one gather round (small) and a direct round of RDMA writes from the
// registered input into the owners' scratch (48 KiB per rank); broadcast inline, down the
// binomial tree (160 KiB) and scattered then gathered (400 KiB, with a tail).
TEST(Verbs, ReduceScatterAndBroadcast) {
  expect_all_ok(run_ranks(3, [](int, int) {
    require_verbs();
    using namespace testing::reduction;
    reduce_scatter_and_check({}, 7, DType::Float32, ReduceOp::Sum, 0, Layout::Flat);
    reduce_scatter_and_check({}, 12288, DType::Float32, ReduceOp::Sum, 1, Layout::Stacked);
    reduce_scatter_and_check({}, 6144, DType::Int64, ReduceOp::Max, 2, Layout::InPlace);
    broadcast_and_check({}, 1, 9, DType::Int32, 0);
    broadcast_and_check({}, 2, 40000, DType::Float32, 1);
    broadcast_and_check({}, 0, 100001, DType::Float32, 2);
  }));
}

// Async work and a second thread on another group, over verbs: the serialized transport's
// leader/follower waits on the completion channel.
TEST(Verbs, AsyncWorkAndTwoThreads) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    Group other = new_group({0, 1});
    std::exception_ptr error;
    std::thread side([&] {
      try {
        for (int iter = 0; iter < 20; ++iter)
          gather_and_check(other, 5000, DType::Float32, DType::Float32, false, iter);
      } catch (...) {
        error = std::current_exception();
      }
    });
    std::vector<Tensor> ts;
    std::vector<Work> works;
    for (int i = 0; i < 10; ++i) {
      ts.push_back(zeros({3000}));
      for (int64_t j = 0; j < 3000; ++j)
        ts.back().set(j, rank + j + i);
      works.push_back(all_reduce(ts.back(), ReduceOp::Sum, {}, true));
    }
    for (int i = 0; i < 10; ++i) {
      works[i].wait();
      for (int64_t j = 0; j < 3000; ++j) {
        RANK_CHECK(ts[i].item(j) == world * (j + i) + 1, "work " << i << " element " << j);
      }
    }
    side.join();
    if (error) std::rethrow_exception(error);
  }));
}

// Immediates once carried the group id mod 256 and the call number mod 128, and the one
// transport every group shares matched arrivals by them: the 256th new_group (id 256) and the
// first member group (id 8192) collided with the world, and async calls at equal call numbers
// hung or completed each other with chunks not yet landed. Now the receiver picks the token
// in every write's immediate. Both groups run async 256 KiB all-gathers (the data path, not
// inline) against the world's, call for call, every element checked.
TEST(Verbs, GroupsWhoseIdsCollideModulo256NeverTakeEachOthersWrites) {
  expect_all_ok(run_ranks(2, [](int rank, int world) {
    require_verbs();
    for (int i = 0; i < 255; ++i) {
      Group g = new_group({0, 1});
      destroy_group(g);
    }
    Group g256 = new_group({0, 1});   // new_group ids 1..255 came and went: this is id 256
    constexpr int64_t n = 64 * 1024;  // 256 KiB of float32 per rank
    for (int round = 0; round < 40; ++round) {
      std::vector<Tensor> ins, outs;
      std::vector<Work> works;
      for (const Group* g :
           {static_cast<const Group*>(nullptr), static_cast<const Group*>(&g256)}) {
        Tensor in = zeros({n});
        for (int64_t j = 0; j < n; ++j)
          in.set(j, rank * 1000 + j % 997 + round + (g ? 500000 : 0));
        Tensor out = zeros({world * n});
        ins.push_back(in);
        outs.push_back(out);
        works.push_back(all_gather_into_tensor(outs.back(), ins.back(), g ? *g : Group(), true));
      }
      for (size_t w = 0; w < works.size(); ++w) {
        works[w].wait();
        for (int r = 0; r < world; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            const double want = r * 1000 + j % 997 + round + (w ? 500000 : 0);
            RANK_CHECK(outs[w].item(r * n + j) == want,
                       "round " << round << " group " << w << " rank " << r << " element " << j);
          }
        }
      }
    }
  }));
}

}  // namespace
}  // namespace rdmacoll
