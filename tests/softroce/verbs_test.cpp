// The verbs test list, run inside the SoftRoCE VM (tests/softroce/run-suite.sh) with
// RDMACOLL_TRANSPORT=verbs: real libibverbs against rdma_rxe. Sizes stay at MiB scale because
// SoftRoCE under TCG moves a few MB/s.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "api/debug.hpp"
#include "gather_check.hpp"
#include "reduce_check.hpp"
#include "ring_calls.hpp"
#include "rooted_check.hpp"
#include "transport/verbs/footprint.hpp"

namespace rdmacoll {
namespace {

using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::gather_and_check;
using testing::input_value;
using testing::run_ranks;
using testing::RunOptions;

void require_verbs() {
  RANK_CHECK(transport_name() == "verbs", "transport is " << transport_name());
}

// Joins the job as a host of its own (RDMACOLL_HOST_ID), so schedules run as across hosts.
void init_as_own_host(int rank) {
  ::setenv("RDMACOLL_HOST_ID", ("host" + std::to_string(rank)).c_str(), 1);
  init_process_group();
}

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

// One counter of detail::transport_counters() ("name=value ...").
uint64_t transport_counter(const std::string& name) {
  std::istringstream in(detail::transport_counters());
  std::string pair;
  while (in >> pair) {
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) return std::stoull(pair.substr(eq + 1));
  }
  throw std::runtime_error("no counter " + name);
}

// `calls` all-gathers of 2 int32 per rank (8 B: inline in the descriptor), every element
// checked; what the eager counters moved by. `late`: messages found only after a sleep ran to
// poll()'s 100 ms timeout. A lost wake-up shows there, but so does a writer that took that long
// to ring (5 ranks on 2 slow vCPUs, ASan): only the sleep test, on fast ranks, asserts it.
struct EagerMoves {
  uint64_t writes = 0, fallbacks = 0, sleeps = 0, rings = 0, late = 0;
};
EagerMoves small_calls(int rank, int world, int calls) {
  Tensor in = zeros({2}, DType::Float32);
  Tensor out = zeros({2 * world}, DType::Float32);
  const char* names[] = {"eager_writes", "eager_fallbacks", "eager_sleeps", "eager_rings",
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
      "rank %d: %d calls: eager_writes=%llu eager_fallbacks=%llu eager_sleeps=%llu "
      "eager_rings=%llu eager_late=%llu\n",
      rank, calls, static_cast<unsigned long long>(m.writes),
      static_cast<unsigned long long>(m.fallbacks), static_cast<unsigned long long>(m.sleeps),
      static_cast<unsigned long long>(m.rings),
      static_cast<unsigned long long>(after[4] - before[4]));
  return m;
}

// Small calls' descriptors (their chunks inline) go by RDMA WRITE into the peer's eager slots:
// every call writes at least one message per peer there, and with credits coming back every
// half ring none falls back to a SEND. The results are checked element by element.
TEST(Verbs, EagerSlotsCarrySmallCalls) {
  for (int world : {2, 3}) {
    expect_all_ok(run_ranks(world, [](int rank, int p) {
      require_verbs();
      const int calls = 200;
      const EagerMoves m = small_calls(rank, p, calls);
      RANK_CHECK(m.writes >= static_cast<uint64_t>(calls * (p - 1)),
                 m.writes << " eager writes for " << calls << " calls");
      RANK_CHECK(m.fallbacks == 0, m.fallbacks << " messages fell back to SENDs");
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

// Credits held back (a test hook) past the ring: the first 4 messages to the peer take its 4
// slots, every later one goes as a SEND, and the two paths mix without a wrong element.
TEST(Verbs, EagerSlotsFallBackToSendsWithoutCredit) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_IB_EAGER_SLOTS", "4"}, {"RDMACOLL_TEST_EAGER_HOLD_CREDITS", "1"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int p) {
        require_verbs();
        const uint64_t before = transport_counter("eager_writes");
        const EagerMoves m = small_calls(rank, p, 60);
        const uint64_t total = transport_counter("eager_writes");
        RANK_CHECK(total == 4, total << " eager writes in all (the ring has 4 slots)");
        RANK_CHECK(m.fallbacks + m.writes >= 60 && m.fallbacks >= 60 - (4 - before),
                   m.fallbacks << " fallbacks");
      },
      opt));
}

// Five ranks, each its own host: the descriptors ride Bruck's rounds (rank - 2^k), so some
// pairs carry messages one way only (rank r + 2 writes to r, r never to r + 2) and the
// receiver's credits cannot ride on messages of its own: it writes them back every half ring.
// Without them the writer would run out of slots after 8 messages and fall back to SENDs.
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
        RANK_CHECK(m.fallbacks == 0, m.fallbacks << " messages fell back to SENDs");
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
        RANK_CHECK(m.writes == 0 && m.fallbacks == 0,
                   m.writes << " eager writes, " << m.fallbacks << " fallbacks");
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

// Issue 24's collectives over verbs, as hosts of their own: inline (in the descriptors) and
// past the inline limit (one-sided writes into the receivers' registered outputs), uneven
// all-to-all splits with zeros, every element of every rank checked.
TEST(Verbs, GatherScatterReduceAndAllToAll) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      3,
      [](int rank, int) {
        init_as_own_host(rank);
        require_verbs();
        using namespace testing::rooted;
        int iter = 0;
        for (int64_t n : {int64_t{5}, int64_t{40000}}) {
          testing::rooted::gather_and_check({}, 1, n, DType::Float32, iter++);
          testing::rooted::gather_and_check({}, 0, n, DType::Int64, iter++, true);
          scatter_and_check({}, 2, n, DType::Float32, iter++);
          reduce_and_check({}, 0, n, DType::Float32, ReduceOp::Sum, iter++);
          reduce_and_check({}, 2, n, DType::Int32, ReduceOp::Max, iter++);
        }
        auto uneven = [](int i, int j) { return int64_t{(i + 2 * j) % 3}; };
        all_to_all_and_check({}, uneven, 1, DType::Float32, iter++);
        all_to_all_and_check({}, uneven, 20000, DType::Float32, iter++);
        all_to_all_and_check(
            {}, [](int, int) { return int64_t{4}; }, 3, DType::Int8, iter++, true);
        destroy_process_group();
      },
      opt));
}

// send/recv over verbs: only the two ranks talk. Several outstanding sends with different tags
// received in the other order, a ring of isends, and a recv from any source; inline and
// written sizes.
TEST(Verbs, SendRecvTagsRingAndAnySource) {
  RunOptions opt;
  opt.init = false;
  expect_all_ok(run_ranks(
      3,
      [](int rank, int p) {
        init_as_own_host(rank);
        require_verbs();
        auto filled = [](int64_t n, int from, int iter) {
          Tensor t = zeros({n});
          for (int64_t i = 0; i < n; ++i)
            t.set(i, input_value(from, i, iter, DType::Float32));
          return t;
        };
        auto check_from = [](const Tensor& t, int from, int iter, const char* what) {
          for (int64_t i = 0; i < t.numel(); ++i)
            RANK_CHECK(t.item(i) == input_value(from, i, iter, DType::Float32),
                       what << ": element " << i << " of " << t.numel() << ": got " << t.item(i));
        };
        for (int64_t n : {int64_t{7}, int64_t{50000}}) {
          if (rank == 0) {
            std::vector<Tensor> keep;
            std::vector<Work> works;
            for (int tag = 0; tag < 3; ++tag) {
              keep.push_back(filled(n, tag, 1));
              works.push_back(send(keep.back(), 1, {}, tag, true));
            }
            when_all(works).wait();
          } else if (rank == 1) {
            for (int tag = 2; tag >= 0; --tag) {
              Tensor t = zeros({n});
              recv(t, 0, {}, tag);
              check_from(t, tag, 1, "tagged send");
            }
          }
          Tensor out = filled(n, rank, 2);
          Work w = send(out, (rank + 1) % p, {}, 5, true);
          Tensor in = zeros({n});
          recv(in, (rank + p - 1) % p, {}, 5);
          w.wait();
          check_from(in, (rank + p - 1) % p, 2, "ring");
          if (rank == 2) {
            for (int k = 0; k < 2; ++k) {
              Tensor t = zeros({n});
              Work r = recv(t, kAnySource, {}, 6);
              check_from(t, r.source_rank(), 3, "any source");
            }
          } else {
            send(filled(n, rank, 3), 2, {}, 6);
          }
        }
        destroy_process_group();
      },
      opt));
}

// A receiver that stops making calls (busy for 2 s, far past the few milliseconds its QPs
// retry "receiver not ready") while the sender posts 600 small sends to it, more than its whole
// shared receive queue, each a SEND (no eager slots): the sender holds back what its receive
// credits do not cover, nothing fails, and every message arrives whole once the receiver reads.
// Without credits the queue runs dry and the sender's QP exhausts its RNR retries.
TEST(Verbs, AReceiverThatStopsCallingHoldsSendersBackAndNothingFails) {
  RunOptions opt;
  opt.env = {{"RDMACOLL_IB_EAGER_SLOTS", "0"}};
  expect_all_ok(run_ranks(
      2,
      [](int rank, int) {
        require_verbs();
        constexpr int kMessages = 600;
        constexpr int64_t kElements = 5;
        auto value = [](int i, int64_t e) { return static_cast<float>(i * 8 + e); };
        barrier();
        if (rank == 0) {
          const uint64_t waits = transport_counter("credit_waits");
          std::vector<Tensor> keep;
          std::vector<Work> works;
          for (int i = 0; i < kMessages; ++i) {
            Tensor t = zeros({kElements});
            for (int64_t e = 0; e < kElements; ++e)
              t.set(e, value(i, e));
            keep.push_back(t);
            works.push_back(send(keep.back(), 1, {}, i % 7, true));
          }
          when_all(works).wait();
          RANK_CHECK(transport_counter("credit_waits") > waits, "no send waited for a credit");
        } else {
          // The scenario itself, not a wait for something: a rank busy elsewhere.
          std::this_thread::sleep_for(std::chrono::seconds(2));
          for (int i = 0; i < kMessages; ++i) {
            Tensor t = zeros({kElements});
            recv(t, 0, {}, i % 7);
            for (int64_t e = 0; e < kElements; ++e)
              RANK_CHECK(t.item(e) == value(i, e),
                         "message " << i << " element " << e << ": got " << t.item(e));
          }
          RANK_CHECK(transport_counter("receive_credit_writes") > 0, "no credit handed back");
        }
        barrier();
      },
      opt));
}

// A peer killed in the middle of a 4 MiB write it receives: the writer raises PeerFailure (or
// Timeout) within the timeout, a second group keeps running meanwhile and after, and the
// writer's sends in flight and send buffers in use fall back to what the pair's own calls hold
// (the failed peer's QPs go to ERR and what was posted there is retired at once; a leaked
// 4 MiB write alone would hold 4 work requests).
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
        // by later calls). Both members decide together, so they make the same calls.
        auto quiet = [&]() {
          for (int i = 0; i < 50; ++i) {
            barrier(pair);
            unsigned long long sends = 0, buffers = 0;
            std::sscanf(detail::transport_in_flight().c_str(),
                        "sends_in_flight=%llu send_buffers_in_use=%llu", &sends, &buffers);
            Tensor ok = zeros({1}, DType::Int32);
            ok.set(0, sends <= 2 && buffers <= 1 ? 1 : 0);
            all_reduce(ok, ReduceOp::Sum, pair);
            if (ok.item(0) == 2) return true;
          }
          return false;
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
