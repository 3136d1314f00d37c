// The verbs registration cache's logic, with a fake registrar below its Register/Deregister
// interface (no RDMA device here): handles are counters, and the fake records what is live.

#include "transport/verbs/mr_cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace rdmacoll::transport {
namespace {

struct FakeRegistrar {
  std::set<uintptr_t> live;  // handles registered and not yet deregistered
  uintptr_t next = 1;
  MrCache make(size_t cap, bool enabled = true) {
    return MrCache(
        cap, enabled,
        [this](void*, size_t) {
          live.insert(next);
          return reinterpret_cast<void*>(next++);
        },
        [this](void* h) { live.erase(reinterpret_cast<uintptr_t>(h)); });
  }
};

void* at(uintptr_t a) {
  return reinterpret_cast<void*>(a);
}

TEST(MrCacheWithFakeRegistrar, ABufferInsideACachedRegionReusesIt) {
  FakeRegistrar f;
  MrCache c = f.make(1 << 20);
  auto whole = c.get(at(0x10000), 0x4000);
  auto part = c.get(at(0x11000), 0x1000);  // all_reduce's later rounds: a segment of it
  EXPECT_EQ(part->handle, whole->handle);
  auto over = c.get(at(0x13000), 0x2000);  // runs past the end: a new registration
  EXPECT_NE(over->handle, whole->handle);
  EXPECT_EQ(c.stats().registrations, 2u);
  EXPECT_EQ(c.stats().hits, 1u);
}

TEST(MrCacheWithFakeRegistrar, TheLeastRecentlyUsedGoesFirstOverTheCap) {
  FakeRegistrar f;
  MrCache c = f.make(3 * 0x1000);
  const void* a = c.get(at(0x10000), 0x1000)->handle;
  const void* b = c.get(at(0x20000), 0x1000)->handle;
  c.get(at(0x30000), 0x1000);
  c.get(at(0x10000), 0x1000);  // a is used again; b is now the oldest
  c.get(at(0x40000), 0x1000);  // over the cap: b goes
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.get(at(0x10000), 0x1000)->handle, a);
  EXPECT_NE(c.get(at(0x20000), 0x1000)->handle, b);
  EXPECT_EQ(f.live.count(reinterpret_cast<uintptr_t>(b)), 0u) << "an evicted, unused region stays";
  EXPECT_LE(c.stats().cached_bytes, 3u * 0x1000);
}

TEST(MrCacheWithFakeRegistrar, AnUnmapDropsOverlappingRegionsOnlyAfterTheirUsersLetGo) {
  FakeRegistrar f;
  MrCache c = f.make(1 << 20);
  auto held = c.get(at(0x10000), 0x4000);  // a call still uses it
  const auto h = reinterpret_cast<uintptr_t>(held->handle);
  c.get(at(0x90000), 0x1000);
  c.invalidate(0x12000, 0x1000);  // what the hook does: records only
  EXPECT_EQ(f.live.count(h), 1u);
  c.collect();
  EXPECT_EQ(c.stats().invalidations, 1u);
  EXPECT_EQ(f.live.count(h), 1u) << "deregistered while a call used it";
  // A new buffer at the same address gets a new registration, never the stale one.
  auto fresh = c.get(at(0x10000), 0x4000);
  EXPECT_NE(reinterpret_cast<uintptr_t>(fresh->handle), h);
  held.reset();
  EXPECT_EQ(f.live.count(h), 0u);
  EXPECT_EQ(c.stats().cached_regions, 2u);
}

// PyTorch's allocator unmaps often, mostly memory never registered: those unmaps are not even
// recorded, however many come, and the cache keeps serving its regions.
TEST(MrCacheWithFakeRegistrar, UnmapsOfMemoryNoRegionCoversAreNotRecorded) {
  FakeRegistrar f;
  MrCache c = f.make(1 << 30);
  for (uintptr_t i = 0; i < 8; ++i)
    c.get(at(0x100000 * (i + 1)), 0x1000);
  for (uintptr_t i = 0; i < 10000; ++i) {
    c.invalidate(0x1, 0x1);
    c.invalidate(0x100000 * (i % 8 + 1) + 0x1000, 0x100000 - 0x1000);  // the gaps between
  }
  c.collect();
  const MrCache::Stats s = c.stats();
  EXPECT_EQ(s.unmaps_seen, 20000u);
  EXPECT_EQ(s.unmaps_recorded, 0u);
  EXPECT_EQ(s.cached_regions, 8u);
  for (uintptr_t i = 0; i < 8; ++i)
    c.get(at(0x100000 * (i + 1)), 0x1000);
  EXPECT_EQ(c.stats().registrations, 8u) << "a region was dropped for an unmap beside it";
}

// More unmaps of cached regions than the ring holds: each extra range widens its nearest entry,
// so exactly the unmapped regions go (none is served stale) and the rest of the cache stays.
TEST(MrCacheWithFakeRegistrar, AFullRingMergesRangesAndNeverDropsTheWholeCache) {
  FakeRegistrar f;
  MrCache c = f.make(1 << 30);
  constexpr uintptr_t kRegions = 600, kUnmapped = 300;
  std::vector<uintptr_t> handles;
  for (uintptr_t i = 0; i < kRegions; ++i)
    handles.push_back(reinterpret_cast<uintptr_t>(c.get(at(0x100000 * (i + 1)), 0x1000)->handle));
  for (uintptr_t i = 0; i < kUnmapped; ++i)
    c.invalidate(0x100000 * (i + 1), 0x1000);
  c.collect();
  EXPECT_EQ(c.stats().ring_merges, kUnmapped - MrCache::kRingSize);
  EXPECT_EQ(c.stats().cached_regions, kRegions - kUnmapped);
  for (uintptr_t i = 0; i < kRegions; ++i) {
    const auto h = reinterpret_cast<uintptr_t>(c.get(at(0x100000 * (i + 1)), 0x1000)->handle);
    if (i < kUnmapped) {
      EXPECT_NE(h, handles[i]) << "region " << i << " was unmapped but served again";
    } else {
      EXPECT_EQ(h, handles[i]) << "region " << i << " was dropped without an unmap";
    }
  }
}

// With more regions than the hook tracks it records every unmap, and still drops exactly the
// overlapping regions.
TEST(MrCacheWithFakeRegistrar, MoreRegionsThanTheHookTracksRecordEveryUnmap) {
  FakeRegistrar f;
  MrCache c = f.make(1 << 30);
  const uintptr_t n = MrCache::kTracked + 10;
  for (uintptr_t i = 0; i < n; ++i)
    c.get(at(0x100000 * (i + 1)), 0x1000);
  c.invalidate(0x1, 0x1);
  c.invalidate(0x100000 * n, 0x1000);  // the last region made
  c.invalidate(0x100000 * 5, 0x1000);
  c.collect();
  EXPECT_EQ(c.stats().unmaps_recorded, 3u);
  EXPECT_EQ(c.stats().cached_regions, n - 2);
  // Below the limit again, the hook filters again.
  c.clear();
  c.get(at(0x100000), 0x1000);
  c.invalidate(0x1, 0x1);
  EXPECT_EQ(c.stats().unmaps_recorded, 3u);
}

// The hook watches a range before its registration starts: an unmap that comes meanwhile (from
// another thread, here from inside the registrar) drops the new region at the next lookup.
TEST(MrCacheWithFakeRegistrar, AnUnmapWhileRegisteringDropsTheNewRegion) {
  MrCache* cache = nullptr;
  uintptr_t next = 1;
  MrCache c(
      1 << 20, true,
      [&](void* base, size_t length) {
        if (next == 1) cache->invalidate(reinterpret_cast<uintptr_t>(base), length);
        return reinterpret_cast<void*>(next++);
      },
      [](void*) {});
  cache = &c;
  const void* first = c.get(at(0x10000), 0x1000)->handle;
  EXPECT_NE(c.get(at(0x10000), 0x1000)->handle, first);
  EXPECT_EQ(c.stats().registrations, 2u);
}

TEST(MrCacheWithFakeRegistrar, WithoutMemoryEventsEveryCallRegisters) {
  FakeRegistrar f;
  MrCache c = f.make(1 << 20);
  c.disable();
  auto a = c.get(at(0x10000), 0x1000);
  auto b = c.get(at(0x10000), 0x1000);
  EXPECT_NE(a->handle, b->handle);
  EXPECT_EQ(c.stats().registrations, 2u);
  a.reset();
  b.reset();
  EXPECT_TRUE(f.live.empty());
}

TEST(MrCacheWithFakeRegistrar, EvictDropsTheRegionsOfAFailedCall) {
  FakeRegistrar f;
  MrCache c = f.make(1 << 20);
  const void* h = c.get(at(0x10000), 0x4000)->handle;
  c.get(at(0x90000), 0x1000);
  c.evict(0x10000, 0x4000);
  EXPECT_EQ(f.live.count(reinterpret_cast<uintptr_t>(h)), 0u);
  EXPECT_EQ(c.stats().cached_regions, 1u);
  EXPECT_NE(c.get(at(0x10000), 0x4000)->handle, h);
}

// Symmetric memory across hosts is registered once, when it is made: while its holder keeps
// the pin, every call inside it is served from it, past the cap, with the cache disabled (no
// memory events) and after a failed call's eviction; once the holder lets go it is gone.
TEST(MrCacheWithFakeRegistrar, APinnedRegionServesEveryCallInsideItUntilItsHolderLetsGo) {
  FakeRegistrar f;
  MrCache c = f.make(0x1000);  // a cap below the pinned region
  auto pinned = c.pin(at(0x10000), 0x8000);
  const void* h = pinned->handle;
  EXPECT_EQ(c.get(at(0x10000), 0x8000)->handle, h);
  EXPECT_EQ(c.get(at(0x12000), 0x1000)->handle, h);  // a call's output inside the tensor
  c.get(at(0x90000), 0x1000);
  c.get(at(0xa0000), 0x1000);  // LRU pressure evicts cached regions, not the pin
  c.evict(0x10000, 0x8000);
  EXPECT_EQ(c.get(at(0x14000), 0x4000)->handle, h);
  c.disable();
  EXPECT_EQ(c.get(at(0x10000), 0x100)->handle, h);
  const uint64_t registrations = c.stats().registrations;
  EXPECT_NE(c.get(at(0x17000), 0x2000)->handle, h);  // runs past its end: registered afresh
  EXPECT_EQ(c.stats().registrations, registrations + 1);
  pinned.reset();
  EXPECT_EQ(f.live.count(reinterpret_cast<uintptr_t>(h)), 0u) << "a released pin stays registered";
  EXPECT_NE(c.get(at(0x10000), 0x1000)->handle, h);
}

// The hook runs on whatever thread unmaps, while another registers: under TSan this checks the
// ring's synchronisation, and that neither side blocks the other for good.
TEST(MrCacheWithFakeRegistrar, UnmapsFromAnotherThreadWhileRegistering) {
  std::atomic<uintptr_t> next{1};
  MrCache c(
      1 << 16, true, [&](void*, size_t) { return reinterpret_cast<void*>(next++); }, [](void*) {});
  std::atomic<bool> stop{false};
  std::thread unmapper([&] {
    for (uintptr_t i = 0; !stop.load(); ++i)
      c.invalidate(0x10000 + (i % 64) * 0x1000, 0x1000);
  });
  for (int i = 0; i < 20000; ++i) {
    auto r = c.get(at(0x10000 + static_cast<uintptr_t>(i % 64) * 0x1000), 0x1000);
    ASSERT_NE(r->handle, nullptr);
    if (i % 16 == 0) c.collect();
  }
  stop = true;
  unmapper.join();
  c.collect();
  EXPECT_LE(c.stats().cached_bytes, size_t{1} << 16);
}

}  // namespace
}  // namespace rdmacoll::transport
