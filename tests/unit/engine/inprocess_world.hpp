#pragma once
// A world of ranks as threads of this process over the in-process fabric
// (src/transport/loopback), for the engine's tests: each rank its own endpoint, engine and
// world group.

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "engine/collectives/registry.hpp"
#include "engine/core/group_factory.hpp"
#include "engine/engine.hpp"
#include "engine/group_state.hpp"
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
// test with each rank's error.
template <typename Body>
void run_world(int p, const std::vector<std::string>& hosts, Body body,
               size_t max_message = SIZE_MAX, const std::function<void(Fabric&)>& meanwhile = {}) {
  Fabric fabric(p, max_message);
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

}  // namespace rdmacoll::engine
