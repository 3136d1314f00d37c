// What rank 0's store serves at scale, simulated (no processes): init's exchanges as the
// rendezvous makes them (bootstrap/store_gather.hpp's plan, its blocks as encoded), and a first
// call's connections as the verbs connector makes them (qp/ and up/ keys for each peer the call
// connects, watched keys polled with the connector's own backoff), each request and byte counted
// with the wire's framing (16-byte headers). The printed figures are docs/design.md's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "bootstrap/store_gather.hpp"
#include "transport/verbs/connector.hpp"

namespace rdmacoll::bootstrap {
namespace {

double poll_first_ms();

struct Served {
  uint64_t requests = 0;
  uint64_t bytes = 0;  // both ways, headers included
  void request(size_t key, size_t value_in, size_t value_out) {
    ++requests;
    bytes += 16 + key + value_in + 16 + value_out;
  }
};

// One init exchange of `value` bytes per rank.
Served init_exchange(int p, size_t value) {
  const StoreGather plan(p);
  Served s;
  const size_t key = 24;  // "rdmacoll/verbs/v/1234" and the like
  for (int r = 0; r < p; ++r) {
    for (const StoreGather::Step& step : plan.steps(r)) {
      const int b = step.index;
      const size_t block = (plan.end_of(b) - plan.first_of(b)) * (8 + value);
      switch (step.kind) {
        case StoreGather::Step::Kind::PostValue:
          s.request(key, value, 0);
          break;
        case StoreGather::Step::Kind::ReadValue:
          s.request(key, 8, value);
          break;
        case StoreGather::Step::Kind::PostBlock:
          s.request(key, block, 0);
          break;
        case StoreGather::Step::Kind::ReadBlock:
          s.request(key, 8, block);
          break;
      }
    }
  }
  return s;
}

// A first call that connects every rank to its log2(p) recursive-doubling peers (one rank per
// host), ranks arriving spread uniformly over `skew_ms`. A rank posts its QP numbers (28 B) for
// each peer and watches the peers'; once it has a peer's, it posts its "up" mark and watches the
// peer's. `multi`: one request per poll for every watched key (Store::get_present), else a
// check per key and a get for each key found (the connector before). The poll waits start at
// Connector::kPollFirst and double up to `poll_max` (on average 7/8 of it with the jitter).
Served first_call(int p, double skew_ms, bool multi, double poll_max_ms, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> spread(0, skew_ms);
  std::vector<double> arrive(p);
  for (double& a : arrive)
    a = spread(rng);
  int logp = 0;
  while ((1 << logp) < p)
    ++logp;
  Served s;
  const size_t key = 28;  // "rdmacoll/verbs/qp/1234/5678"
  const double first = poll_first_ms();
  for (int r = 0; r < p; ++r) {
    // When each watched key appears: a peer's qp/ key at its arrival, its up/ key once it
    // has our qp/ key too (both arrived), taken as max of the two arrivals.
    std::vector<double> appear;
    for (int k = 0; k < logp; ++k) {
      const int q = r ^ (1 << k);
      if (q >= p) continue;
      s.request(key, 28, 0);  // our qp/ key
      appear.push_back(arrive[q]);
    }
    for (int k = 0; k < logp; ++k) {
      const int q = r ^ (1 << k);
      if (q >= p) continue;
      appear.push_back(std::max(arrive[q], arrive[r]));
    }
    // Polls until every key has come; the up/ posts happen along the way (one each).
    double t = arrive[r], wait = first;
    std::vector<bool> have(appear.size(), false);
    for (size_t left = appear.size(); left > 0;) {
      size_t asked = 0, found = 0;
      for (size_t i = 0; i < appear.size(); ++i) {
        if (have[i]) continue;
        ++asked;
        if (appear[i] <= t) {
          have[i] = true;
          ++found;
          if (i < appear.size() / 2) s.request(key, 1, 0);  // our up/ key for that peer
        }
      }
      if (multi) {
        s.request(0, 4 + asked * (4 + key), asked + found * (4 + 28));
      } else {
        for (size_t i = 0; i < asked; ++i)
          s.request(key, 0, 0);  // check
        for (size_t i = 0; i < found; ++i)
          s.request(key, 8, 28);  // get
      }
      left -= found;
      t += wait * (multi ? 7.0 / 8 : 1.0);
      wait = std::min(wait * 2, poll_max_ms);
    }
  }
  return s;
}

double poll_first_ms() {
  return std::chrono::duration<double, std::milli>(transport::verbs_impl::Connector::kPollFirst)
      .count();
}

TEST(StoreAtScale, RankZerosStoreServesInitAndTheFirstCall) {
  const double new_max =
      std::chrono::duration<double, std::milli>(transport::verbs_impl::Connector::kPollMax).count();
  for (int p : {1024, 4096}) {
    const Served init = init_exchange(p, 160);
    std::printf("p %d: one init exchange of 160 B per rank: %llu requests, %.1f MB\n", p,
                static_cast<unsigned long long>(init.requests), init.bytes / 1e6);
    for (double skew : {0.0, 1000.0, 10000.0}) {
      const Served before = first_call(p, skew, false, 10.0);
      const Served after = first_call(p, skew, true, new_max);
      std::printf(
          "p %d, first call, arrivals over %.0f ms: per-key polls %llu requests (%.1f MB), "
          "one request per poll %llu requests (%.1f MB)\n",
          p, skew, static_cast<unsigned long long>(before.requests), before.bytes / 1e6,
          static_cast<unsigned long long>(after.requests), after.bytes / 1e6);
      EXPECT_LT(after.requests, before.requests) << p << " " << skew;
      if (skew >= 1000) {
        EXPECT_LT(after.requests * 5, before.requests) << p << " " << skew;
      }
    }
    // Arriving together: each rank posts 2 keys per peer and polls about twice.
    const Served together = first_call(p, 0, true, new_max);
    int logp = 0;
    while ((1 << logp) < p)
      ++logp;
    EXPECT_LE(together.requests, static_cast<uint64_t>(p) * (2 * logp + 3)) << p;
  }
}

// The whole of init and destroy as rank 0's store serves them (bootstrap/rendezvous.cpp), by
// bootstrap. Store: each rank's hello, its rank claim (add, set), the world size (rank 0's set,
// everyone's get), three exchanges (settings, placements, transport addresses) and the parting
// (set arrived, add destroy, get destroyed, add closed; rank 0 waits for all_closed). PMIx: the
// exchanges and the parting are the launcher's fences; over verbs each rank's hello to the store
// its first contacts use (on UCX there is no store at all).
Served store_init_and_destroy(int p) {
  Served s;
  for (int r = 0; r < p; ++r) {
    s.request(0, 64, 64);  // the hello
    s.request(24, 8, 8);   // claim: add
    s.request(28, 24, 0);  // claim: set who
    s.request(20, 8, 4);   // world size: get
    s.request(24, 1, 0);   // arrived
    s.request(16, 8, 8);   // destroy: add
    s.request(18, 8, 2);   // destroyed: get
    s.request(16, 8, 8);   // closed: add
  }
  s.request(20, 4, 0);                       // rank 0's world size
  s.request(20, 8, 1);                       // rank 0: all_closed
  for (size_t value : {400u, 120u, 200u}) {  // settings, placement, address
    const Served x = init_exchange(p, value);
    s.requests += x.requests;
    s.bytes += x.bytes;
  }
  return s;
}

Served pmix_init_and_destroy(int p) {
  Served s;
  for (int r = 0; r < p; ++r)
    s.request(0, 64, 64);  // the hello to the store of the verbs transport's first contacts
  return s;
}

TEST(StoreAtScale, UnderPmixRankZeroServesOnlyEachRanksHelloAtInitAndNothingAtDestroy) {
  for (int p : {2, 4, 8, 16, 1024, 4096}) {
    const Served store = store_init_and_destroy(p);
    const Served pmix = pmix_init_and_destroy(p);
    std::printf(
        "p %d: init and destroy, rank 0's store serves %llu requests (%.2f per rank, %.1f MB) "
        "under the store bootstrap, %llu (%.2f per rank) under PMIx over verbs, none on UCX\n",
        p, static_cast<unsigned long long>(store.requests), double(store.requests) / p,
        store.bytes / 1e6, static_cast<unsigned long long>(pmix.requests),
        double(pmix.requests) / p);
    EXPECT_EQ(pmix.requests, static_cast<uint64_t>(p));
    EXPECT_GT(store.requests, 8 * pmix.requests) << p;
  }
}

}  // namespace
}  // namespace rdmacoll::bootstrap
