// One rank of a chaos run (tests/chaos/chaos.py starts them): random collectives, rooted calls,
// all-to-alls and send/recv rings from a seed every rank shares (ops, sizes, dtypes, roots,
// splits, async or not, subgroups made and destroyed, completion callbacks that throw or destroy
// their group), every element of every output checked.
// Exit codes the driver counts:
//   0  every call right;  3  a clear rdmacoll error (PeerFailure, Timeout, InvalidArgument);
//   4  a wrong element (printed);  anything else, or a signal: a crash.
//   chaos_worker <seed> <calls> [threads]   (threads > 1: each on a group of its own)
// CHAOS_EXIT_AT="<call>:abort|plain" (the driver's exiting victim, one thread only): before that
// call the rank leaves, through abort_process_group() as torch's exit hook does, or by exit()
// without destroy_process_group, and exits 0.
// CHAOS_RECOVER=<victim> (recovery runs, one thread only): every survivor, once its calls are
// done or one raised a clear error, shrinks the world without the victim (the driver tells it
// who, as a job's manager would; all survivors do, whether they saw the victim go or not, so
// none waits for another that went on) and runs 20 more random calls on the shrunk group,
// every element checked; it prints "recovered" and exits 0 once they are right.
#include <rdmacoll/rdmacoll.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace rdmacoll;

namespace {

// CLOCK_MONOTONIC in seconds, which the driver's time.monotonic() also reads: when a rank left
// and when a survivor raised.
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Small exact values, so sums of up to 8 ranks stay exact in every dtype used.
double value(int global_rank, int call, int64_t i, DType dt) {
  const int64_t v = (global_rank * 7 + call * 13 + i * 3) % 16;
  return dt == DType::UInt8 ? static_cast<double>(v) : static_cast<double>(v - 8);
}

struct WrongElement {
  std::string what;
};

// What a completion callback throws; wait() must rethrow it, on every rank alike.
struct CallbackThrew {};

void expect(const Tensor& t, int64_t i, double want, const std::string& what) {
  if (t.item(i) != want) {
    throw WrongElement{what + " element " + std::to_string(i) + ": got " +
                       std::to_string(t.item(i)) + ", want " + std::to_string(want)};
  }
}

}  // namespace

// `calls` random calls on `group` (members: its global ranks), drawn from `seed`, which every
// rank shares for this thread. Throws WrongElement or an rdmacoll::Error.
void run_calls(uint64_t seed, int calls, Group group, std::vector<int> members, bool switch_groups,
               int exit_at = -1, bool exit_plain = false) {
  const int me = get_rank();
  const int world = get_world_size();
  std::mt19937_64 rng(seed);  // the same stream on every rank
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const DType dtypes[] = {DType::Int32,   DType::Int64, DType::Float32,
                          DType::Float64, DType::Int8,  DType::UInt8};
  const int64_t sizes[] = {0, 1, 7, 64, 1000, 4096, 65536, 262144};
  for (int c = 0; c < calls; ++c) {
    if (c == exit_at) {
      std::printf("[rank %d] leaving at %.6f before call %d (%s)\n", me, now_s(), c,
                  exit_plain ? "plain" : "abort");
      std::fflush(stdout);
      if (!exit_plain) abort_process_group();
      std::exit(0);
    }
    // Now and then switch to a new random subgroup (every rank calls new_group alike; one
    // thread only: with several, each keeps the group it was given).
    if (switch_groups && pick(8) == 0) {
      if (!group.is_default() && pick(2) == 0) destroy_group(group);
      std::vector<int> subset;
      for (int r = 0; r < world; ++r)
        if (pick(3) != 0) subset.push_back(r);
      if (subset.size() < 2) subset = {0, world - 1};
      group = new_group(subset);
      members = subset;
    }
    const int op = pick(10);
    const DType dt = dtypes[pick(6)];
    const int64_t n = sizes[pick(8)];
    const bool async = pick(3) == 0;
    const int src = members[pick(static_cast<int>(members.size()))];
    // all_to_all's rows from group rank i to j, [i * size + j]: uneven, zeros included.
    const int gsize = static_cast<int>(members.size());
    std::vector<int64_t> rows(static_cast<size_t>(gsize) * gsize);
    for (auto& r : rows)
      r = pick(4) == 0 ? 0 : n / 8 + pick(3);
    // An async call's completion callback, now and then: one that throws (wait() must rethrow
    // it, the outputs still right), or one that destroys the call's subgroup from inside.
    const int callback = async ? pick(6) : 0;  // 1: throws, 2: destroys a subgroup
    // (Not for the send/recv ring: its isend is still the group's when the recv completes.)
    const bool destroy_in_callback =
        callback == 2 && switch_groups && !group.is_default() && op != 9;
    if (!group.is_member()) {  // non-members draw alike, then skip
      if (destroy_in_callback) {
        destroy_group(group);
        members.resize(world);
        std::iota(members.begin(), members.end(), 0);
      }
      continue;
    }
    auto finish = [&](const Work& w) {
      if (callback == 1) {
        w.on_completion([](std::exception_ptr e) {
          if (!e) throw CallbackThrew{};
        });
        try {
          w.wait();
        } catch (const CallbackThrew&) {
          return;
        }
        throw WrongElement{"a completion callback's exception was not rethrown by wait()"};
      }
      if (destroy_in_callback) {
        w.on_completion([g = group](std::exception_ptr) mutable { destroy_group(g); });
      }
      w.wait();
    };
    const int p = group.size();
    const int gr = group.rank();
    const std::string what = "call " + std::to_string(c);
    if (op == 0) {  // all_gather_into_tensor
      Tensor in = zeros({n}, dt), out = zeros({p * n}, dt);
      for (int64_t i = 0; i < n; ++i)
        in.set(i, value(me, c, i, dt));
      finish(all_gather_into_tensor(out, in, group, async));
      for (int r = 0; r < p; ++r)
        for (int64_t i = 0; i < n; ++i)
          expect(out, r * n + i, value(members[r], c, i, dt), what + " all_gather");
    } else if (op == 1) {  // all_reduce
      Tensor t = zeros({n}, dt);
      for (int64_t i = 0; i < n; ++i)
        t.set(i, value(me, c, i, dt));
      finish(all_reduce(t, ReduceOp::Sum, group, async));
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : members)
          want += value(m, c, i, dt);
        expect(t, i, want, what + " all_reduce");
      }
    } else if (op == 2) {  // reduce_scatter_tensor
      Tensor in = zeros({p * n}, dt), out = zeros({n}, dt);
      for (int64_t i = 0; i < p * n; ++i)
        in.set(i, value(me, c, i, dt));
      finish(reduce_scatter_tensor(out, in, ReduceOp::Sum, group, async));
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : members)
          want += value(m, c, gr * n + i, dt);
        expect(out, i, want, what + " reduce_scatter");
      }
    } else if (op == 3) {  // broadcast
      Tensor t = zeros({n}, dt);
      for (int64_t i = 0; i < n; ++i)
        t.set(i, me == src ? value(me, c, i, dt) : 99);
      finish(broadcast(t, src, group, async));
      for (int64_t i = 0; i < n; ++i)
        expect(t, i, value(src, c, i, dt), what + " broadcast");
    } else if (op == 5) {  // gather to src
      Tensor in = zeros({n}, dt), out = zeros({me == src ? p * n : 0}, dt);
      for (int64_t i = 0; i < n; ++i)
        in.set(i, value(me, c, i, dt));
      finish(gather(me == src ? &out : nullptr, in, src, group, async));
      for (int r = 0; me == src && r < p; ++r)
        for (int64_t i = 0; i < n; ++i)
          expect(out, r * n + i, value(members[r], c, i, dt), what + " gather");
    } else if (op == 6) {  // scatter from src
      Tensor in = zeros({me == src ? p * n : 0}, dt), out = zeros({n}, dt);
      for (int r = 0; me == src && r < p; ++r)
        for (int64_t i = 0; i < n; ++i)
          in.set(r * n + i, value(members[r], c, i, dt));
      finish(scatter(out, me == src ? &in : nullptr, src, group, async));
      for (int64_t i = 0; i < n; ++i)
        expect(out, i, value(me, c, i, dt), what + " scatter");
    } else if (op == 7) {  // reduce to src; the others' tensors stay as they were
      Tensor t = zeros({n}, dt);
      for (int64_t i = 0; i < n; ++i)
        t.set(i, value(me, c, i, dt));
      finish(reduce(t, src, ReduceOp::Sum, group, async));
      for (int64_t i = 0; i < n; ++i) {
        double want = 0;
        for (int m : members)
          want += value(m, c, i, dt);
        expect(t, i, me == src ? want : value(me, c, i, dt), what + " reduce");
      }
    } else if (op == 8) {  // all_to_all_single, uneven rows of one element
      auto piece = [&](int from, int to, int64_t k) {
        return value(members[from], c, to * 1000 + k, dt);
      };
      std::vector<int64_t> in_splits(p), out_splits(p);
      for (int j = 0; j < p; ++j) {
        in_splits[j] = rows[gr * p + j];
        out_splits[j] = rows[j * p + gr];
      }
      Tensor in = zeros({std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0})}, dt);
      Tensor out = zeros({std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0})}, dt);
      for (int j = 0, at = 0; j < p; ++j)
        for (int64_t k = 0; k < in_splits[j]; ++k)
          in.set(at++, piece(gr, j, k));
      finish(all_to_all_single(out, in, out_splits, in_splits, group, async));
      for (int i = 0, at = 0; i < p; ++i)
        for (int64_t k = 0; k < out_splits[i]; ++k, ++at)
          expect(out, at, piece(i, gr, k), what + " all_to_all");
    } else if (op == 9 && p > 1) {  // a ring of send/recv in the group (a rank sends no self)
      Tensor out = zeros({n}, dt), in = zeros({n}, dt);
      for (int64_t i = 0; i < n; ++i)
        out.set(i, value(me, c, i, dt));
      const int tag = c % (1 << 20);
      Work s = send(out, members[(gr + 1) % p], group, tag, true);
      finish(recv(in, members[(gr + p - 1) % p], group, tag, async));
      s.wait();
      for (int64_t i = 0; i < n; ++i)
        expect(in, i, value(members[(gr + p - 1) % p], c, i, dt), what + " send/recv");
    } else {
      finish(barrier(group, async));
    }
    if (destroy_in_callback) {  // the callback destroyed it; on to the world
      group = Group{};
      members.resize(world);
      std::iota(members.begin(), members.end(), 0);
    }
  }
}

// After a clear error in a recovery run: the world without `victim`, and calls on it from a seed
// every survivor shares (each may have raised at another call). A shrunk group's calls wait
// longer than the run's timeout: a survivor stalled in an old call on a live peer that already
// moved on reaches the shrunk group only when that call times out.
void recover(uint64_t seed, int victim) {
  const int world = get_world_size();
  Group s = shrink_group(Group(), {victim}, ShrinkMode::AbortParent, std::chrono::seconds(30));
  std::vector<int> members;
  for (int r = 0; r < world; ++r)
    if (r != victim) members.push_back(r);
  run_calls(seed ^ 0x5eedULL, 20, s, members, false);
  std::printf("[rank %d] recovered: 20 calls right on the %zu survivors\n", get_rank(),
              members.size());
  destroy_group(s);
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: chaos_worker <seed> <calls> [threads]\n");
    return 2;
  }
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  const int calls = std::atoi(argv[2]);
  const int threads = argc == 4 ? std::max(1, std::atoi(argv[3])) : 1;
  int me = -1;
  try {
    init_process_group();
    me = get_rank();
    const int world = get_world_size();
    std::vector<int> all(world);
    std::iota(all.begin(), all.end(), 0);
    if (threads == 1) {
      int exit_at = -1;
      bool exit_plain = false;
      if (const char* e = std::getenv("CHAOS_EXIT_AT")) {
        exit_at = std::atoi(e);
        exit_plain = std::string(e).find("plain") != std::string::npos;
      }
      const char* victim = std::getenv("CHAOS_RECOVER");
      if (victim && std::atoi(victim) != me) {
        try {
          run_calls(seed, calls, Group{}, all, true);
        } catch (const Error& e) {
          std::printf("[rank %d] error at %.6f: %s\n", me, now_s(), e.what());
          std::fflush(stdout);
        }
        recover(seed, std::atoi(victim));
      } else {
        run_calls(seed, calls, Group{}, all, true, exit_at, exit_plain);
      }
    } else {
      // Several threads per rank, each on a group of its own (made here, in the same order on
      // every rank), at once: the case that once stalled over UCX_TLS=tcp.
      std::vector<Group> groups;
      for (int t = 0; t < threads; ++t)
        groups.push_back(new_group(all));
      std::vector<std::exception_ptr> errors(threads);
      std::vector<std::thread> running;
      for (int t = 0; t < threads; ++t) {
        running.emplace_back([&, t] {
          try {
            run_calls(seed * 31 + t, calls, groups[t], all, false);
          } catch (...) {
            errors[t] = std::current_exception();
          }
        });
      }
      for (auto& th : running)
        th.join();
      for (auto& e : errors) {
        if (e) std::rethrow_exception(e);
      }
    }
    destroy_process_group();
    std::printf("[rank %d] ok %d calls\n", me, calls * threads);
    return 0;
  } catch (const WrongElement& e) {
    std::printf("[rank %d] WRONG %s\n", me, e.what.c_str());
    return 4;
  } catch (const Error& e) {
    std::printf("[rank %d] error at %.6f: %s\n", me, now_s(), e.what());
    std::fflush(stdout);
    try {
      destroy_process_group();  // bounded after a failure: the driver times the whole rank
    } catch (const Error&) {
    }
    return 3;
  }
}
