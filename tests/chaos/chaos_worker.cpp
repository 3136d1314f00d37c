// One rank of a chaos run (tests/chaos/chaos.py starts them): random collectives from a seed
// every rank shares (ops, sizes, dtypes, async or not, subgroups made and destroyed), every
// element of every output checked. Exit codes the driver counts:
//   0  every call right;  3  a clear rdmacoll error (PeerFailure, Timeout, InvalidArgument);
//   4  a wrong element (printed);  anything else, or a signal: a crash.
//   chaos_worker <seed> <calls>
#include <rdmacoll/rdmacoll.hpp>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace rdmacoll;

namespace {

// Small exact values, so sums of up to 8 ranks stay exact in every dtype used.
double value(int global_rank, int call, int64_t i, DType dt) {
  const int64_t v = (global_rank * 7 + call * 13 + i * 3) % 16;
  return dt == DType::UInt8 ? static_cast<double>(v) : static_cast<double>(v - 8);
}

struct WrongElement {
  std::string what;
};

void expect(const Tensor& t, int64_t i, double want, const std::string& what) {
  if (t.item(i) != want) {
    throw WrongElement{what + " element " + std::to_string(i) + ": got " +
                       std::to_string(t.item(i)) + ", want " + std::to_string(want)};
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: chaos_worker <seed> <calls>\n");
    return 2;
  }
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  const int calls = std::atoi(argv[2]);
  int me = -1;
  try {
    init_process_group();
    me = get_rank();
    const int world = get_world_size();
    std::mt19937_64 rng(seed);  // the same stream on every rank
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
    const DType dtypes[] = {DType::Int32,   DType::Int64, DType::Float32,
                            DType::Float64, DType::Int8,  DType::UInt8};
    const int64_t sizes[] = {0, 1, 7, 64, 1000, 4096, 65536, 262144};
    Group group;  // the default (world) group
    std::vector<int> members(world);
    std::iota(members.begin(), members.end(), 0);
    for (int c = 0; c < calls; ++c) {
      // Now and then switch to a new random subgroup (every rank calls new_group alike).
      if (pick(8) == 0) {
        if (!group.is_default() && pick(2) == 0) destroy_group(group);
        std::vector<int> subset;
        for (int r = 0; r < world; ++r)
          if (pick(3) != 0) subset.push_back(r);
        if (subset.size() < 2) subset = {0, world - 1};
        group = new_group(subset);
        members = subset;
      }
      const int op = pick(5);
      const DType dt = dtypes[pick(6)];
      const int64_t n = sizes[pick(8)];
      const bool async = pick(3) == 0;
      const int src = members[pick(static_cast<int>(members.size()))];
      if (!group.is_member()) continue;  // non-members draw alike, then skip
      const int p = group.size();
      const int gr = group.rank();
      const std::string what = "call " + std::to_string(c);
      if (op == 0) {  // all_gather_into_tensor
        Tensor in = zeros({n}, dt), out = zeros({p * n}, dt);
        for (int64_t i = 0; i < n; ++i)
          in.set(i, value(me, c, i, dt));
        all_gather_into_tensor(out, in, group, async).wait();
        for (int r = 0; r < p; ++r)
          for (int64_t i = 0; i < n; ++i)
            expect(out, r * n + i, value(members[r], c, i, dt), what + " all_gather");
      } else if (op == 1) {  // all_reduce
        Tensor t = zeros({n}, dt);
        for (int64_t i = 0; i < n; ++i)
          t.set(i, value(me, c, i, dt));
        all_reduce(t, ReduceOp::Sum, group, async).wait();
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
        reduce_scatter_tensor(out, in, ReduceOp::Sum, group, async).wait();
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
        broadcast(t, src, group, async).wait();
        for (int64_t i = 0; i < n; ++i)
          expect(t, i, value(src, c, i, dt), what + " broadcast");
      } else {
        barrier(group, async).wait();
      }
    }
    destroy_process_group();
    std::printf("[rank %d] ok %d calls\n", me, calls);
    return 0;
  } catch (const WrongElement& e) {
    std::printf("[rank %d] WRONG %s\n", me, e.what.c_str());
    return 4;
  } catch (const Error& e) {
    std::printf("[rank %d] error: %s\n", me, e.what());
    std::fflush(stdout);
    try {
      destroy_process_group();  // bounded after a failure: the driver times the whole rank
    } catch (const Error&) {
    }
    return 3;
  }
}
