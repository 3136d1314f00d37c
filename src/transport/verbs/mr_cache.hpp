#pragma once
// The verbs transport's registration cache, after UCX's rcache. Registering a buffer pins its
// pages and costs a system call, so registrations are kept and reused: a cached region that
// contains the buffer serves it (all_reduce's per-round segments lie inside the tensor the
// first round registered), least recently used regions go first once the cache holds more than
// its cap (RDMACOLL_MR_CACHE_MB), and a region whose memory is unmapped is dropped.
//
// Unmaps are reported by UCX's memory hooks (ucm), which run inside munmap and inside glibc's
// free/trim with the arena lock held. invalidate() therefore only records the range in a fixed
// ring under a spin flag: no allocation, no blocking lock, no deregistration there. The ranges
// are applied by the next get() or by collect() on the progress path. The hook sees a sorted
// copy of the cached regions' bounds and records only unmaps that overlap one (PyTorch's
// allocator unmaps often, mostly memory we never registered); a full ring merges the new range
// into its nearest entry, so an overflow drops a few neighbours, never the whole cache. Without
// memory events
// (UCX_MEM_EVENTS=no, a failed hook) a new buffer at a reused address would get a stale
// registration, so the cache is then disabled and every call registers afresh.
//
// Regions are shared: dropping one from the cache deregisters it once the calls using it let
// go of it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

namespace rdmacoll::transport {

class MrCache {
 public:
  // One registration: the handle from Register, over [base, base + length).
  struct Region {
    void* handle = nullptr;
    uintptr_t base = 0;
    size_t length = 0;
  };
  using Register = std::function<void*(void* base, size_t length)>;  // throws on failure
  using Deregister = std::function<void(void* handle)>;

  struct Stats {
    uint64_t registrations = 0;    // Register calls
    uint64_t hits = 0;             // get() served by a cached region
    uint64_t evictions = 0;        // dropped for the cap
    uint64_t invalidations = 0;    // dropped because their memory was unmapped (or a call failed)
    uint64_t unmaps_seen = 0;      // invalidate() calls
    uint64_t unmaps_recorded = 0;  // of those, overlapping a cached region (or untracked)
    uint64_t ring_merges = 0;      // recorded into a full ring by widening an entry
    size_t cached_bytes = 0;
    size_t cached_regions = 0;
  };

  // `enabled` false: nothing is cached (no memory events to keep it correct).
  MrCache(size_t capacity_bytes, bool enabled, Register reg, Deregister dereg);
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // A registration covering [base, base + length): a pinned or cached region containing it,
  // else a new one. A zero length gets a region with no handle.
  std::shared_ptr<const Region> get(void* base, size_t length);

  // Registers [base, base + length) for as long as the caller holds the result, and serves
  // get() from it meanwhile, whatever the cap, the memory events or an eviction: the holder
  // keeps the memory mapped (symmetric memory across hosts, registered once when it is made,
  // so no call registers it).
  std::shared_ptr<const Region> pin(void* base, size_t length);
  // The device is going: deregisters what pins are still held (a tensor may outlive its
  // process group), leaving their holders a region without a handle.
  void unpin_all();

  // From the memory-event hook: [address, address + length) is no longer mapped.
  // No allocation, no blocking lock: it runs inside munmap and free.
  void invalidate(uintptr_t address, size_t length) noexcept;

  // Applies recorded invalidations (cheap when there are none); from the progress path.
  void collect();

  // Drops the cached regions overlapping [address, address + length): after a failed call,
  // so that a peer's late write fails remotely instead of landing in memory the user frees.
  void evict(uintptr_t address, size_t length);

  // Drops every cached region.
  void clear();

  // No memory events: cache nothing from now on.
  void disable();
  bool enabled() const { return enabled_.load(); }
  Stats stats() const;

  // Invalidations the ring holds before it merges ranges.
  static constexpr size_t kRingSize = 256;
  // Cached regions the hook sees; with more, it records every unmap.
  static constexpr size_t kTracked = 1024;

 private:
  struct Range {
    uintptr_t lo = 0;
    uintptr_t hi = 0;
  };
  std::shared_ptr<const Region> make(void* base, size_t length);
  void apply_invalidations_locked();
  void drop_overlapping_locked(uintptr_t lo, uintptr_t hi, uint64_t& counter);
  // Copies the bounds of the cached regions (and `extra`, a region being registered) into the
  // hook's view: sorted by start, with the running maximum of the ends.
  void publish_locked(const Range* extra = nullptr);
  // Under spin_: whether the hook must record [lo, hi).
  bool watched(uintptr_t lo, uintptr_t hi) const noexcept;

  const size_t capacity_;
  std::atomic<bool> enabled_;
  Register register_;
  std::shared_ptr<Deregister> deregister_;  // shared with regions that outlive the cache

  mutable std::mutex mu_;
  std::list<std::shared_ptr<const Region>> lru_;     // front: most recently used
  std::vector<std::weak_ptr<const Region>> pinned_;  // pin()'s, while their holders keep them
  Stats stats_;

  // The hook's ring: written under spin_, drained under mu_ then spin_.
  std::atomic_flag spin_ = ATOMIC_FLAG_INIT;
  std::atomic<bool> pending_{false};
  std::atomic<uint64_t> unmaps_seen_{0};
  std::atomic<uint64_t> unmaps_recorded_{0};
  std::atomic<uint64_t> ring_merges_{0};
  Range ring_[kRingSize];
  size_t ring_used_ = 0;
  // The hook's view of the cache: view_[i] sorted by lo, reach_[i] the largest hi of
  // view_[0..i]. view_complete_ false: more regions than kTracked, every unmap is recorded.
  Range view_[kTracked];
  uintptr_t reach_[kTracked] = {};
  size_t view_used_ = 0;
  bool view_complete_ = true;
};

}  // namespace rdmacoll::transport
