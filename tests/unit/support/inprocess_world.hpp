#pragma once
// A world of ranks as threads of this process over the in-process fabric
// (src/transport/loopback), for the engine's tests and each collective's loopback tests
// (in its file in tests/integration/): each rank its own endpoint, engine and world
// group; and the checked all-gather those tests use to show a group still works.

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/collectives/all_gather.hpp"
#include "engine/collectives/registry.hpp"
#include "engine/core/group_factory.hpp"
#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "rdmacoll/tensor.hpp"
#include "topology/topology.hpp"
#include "transport/loopback/loopback_transport.hpp"

namespace rdmacoll::engine {

using transport::loopback::Fabric;

// A world's group as init_process_group makes it, for ranks whose hosts are `hosts`.
inline std::shared_ptr<GroupState> world_group(const std::shared_ptr<transport::Transport>& t,
                                               int rank, const std::vector<std::string>& hosts) {
  GroupSpec spec;
  spec.members.resize(hosts.size());
  std::iota(spec.members.begin(), spec.members.end(), 0);
  spec.global_rank = rank;
  for (const std::string& h : hosts) {
    topology::LocalPlacement p;
    p.host = h;
    spec.placements.push_back(p);
  }
  spec.transport = t;
  spec.timeout = std::chrono::seconds(60);
  spec.collectives = collectives::registry();
  return make_group(std::move(spec));
}

// `ranks_per_host` ranks on each host (0: every rank on one host).
inline std::vector<std::string> hosts_for(int p, int ranks_per_host) {
  std::vector<std::string> h(p);
  for (int r = 0; r < p; ++r)
    h[r] = ranks_per_host ? "host" + std::to_string(r / ranks_per_host) : "one";
  return h;
}

struct RankContext {
  Engine& engine;
  GroupState& group;
  int rank;
  int p;
  Fabric& fabric;
};

// Runs body(ctx) on p threads, one per rank, and `meanwhile(fabric)` on the caller's; fails the
// test with each rank's error. `before(fabric)` runs before any rank starts.
template <typename Body>
void run_world(int p, const std::vector<std::string>& hosts, Body body,
               size_t max_message = SIZE_MAX, const std::function<void(Fabric&)>& meanwhile = {},
               const std::function<void(Fabric&)>& before = {}) {
  Fabric fabric(p, max_message);
  if (before) before(fabric);
  std::vector<std::string> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<transport::Transport> t = transport::make_serialized(fabric.endpoint(r));
        Engine engine(*t, SpinPolicy{std::chrono::microseconds(0), true});
        auto g = world_group(t, r, hosts);
        RankContext ctx{engine, *g, r, p, fabric};
        try {
          body(ctx);
        } catch (...) {
          // A rank that fails leaves, as its process would: peers waiting for it learn of it.
          fabric.kill(r);
          throw;
        }
        g->release();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  if (meanwhile) meanwhile(fabric);
  for (auto& th : threads)
    th.join();
  for (int r = 0; r < p; ++r)
    EXPECT_EQ(errors[r], "") << "rank " << r << " of " << p;
}

// Runs body on p ranks for every p in `sizes`, in each host layout: all on one host, one rank
// per host, two per host.
template <typename Body>
void run_every_layout(std::initializer_list<int> sizes, Body body) {
  for (int p : sizes) {
    for (int per_host : {0, 1, 2})
      run_world(p, hosts_for(p, per_host), body);
  }
}

// A rooted collective's sweep: every layout of 1 to 13 ranks, the middle rank the root, from 0
// to 70000 elements; body(c, root, n, at), `at` naming the case for its checks.
template <typename Body>
void run_rooted_sweep(Body body) {
  run_every_layout({1, 2, 3, 5, 8, 13}, [&body](RankContext& c) {
    const int root = c.p / 2;
    for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{1000}, int64_t{70000}})
      body(c, root, n, " n=" + std::to_string(n) + " p=" + std::to_string(c.p));
  });
}

// The value rank `rank` puts at element i of the call numbered `call`.
inline double value_of(int rank, int64_t i, int call) {
  return static_cast<double>((rank * 131 + i * 7 + call) % 1000);
}

// A rank's check: its failure is the rank's error (run_world reports it).
inline void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// An all-gather of n float32 per rank (in: int64, converted, on odd calls), checked.
inline void gather_checked(RankContext& c, int64_t n, int call) {
  const bool convert = call % 2 == 1;
  Tensor in = zeros({n}, convert ? DType::Int64 : DType::Float32);
  for (int64_t i = 0; i < n; ++i)
    in.set(i, value_of(c.rank, i, call));
  Tensor out = zeros({c.p * n}, DType::Float32);
  for (int64_t i = 0; i < c.p * n; ++i)
    out.set(i, -1);
  RoundArgs a;
  a.collective = &collectives::kAllGather;
  a.out = out.data();
  a.out_dtype = DType::Float32;
  a.out_numel = out.numel();
  a.in = in.data();
  a.in_dtype = in.dtype();
  a.in_numel = n;
  all_gather(c.engine, c.group, a);
  for (int r = 0; r < c.p; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double got = out.item(r * n + i);
      if (got != value_of(r, i, call)) {
        std::ostringstream os;
        os << "all_gather n=" << n << " call " << call << ": chunk " << r << " element " << i
           << " is " << got << ", expected " << value_of(r, i, call);
        throw std::runtime_error(os.str());
      }
    }
  }
}

}  // namespace rdmacoll::engine
