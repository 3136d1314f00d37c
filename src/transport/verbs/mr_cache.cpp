#include "transport/verbs/mr_cache.hpp"

#include <algorithm>
#include <thread>
#include <utility>

namespace rdmacoll::transport {

namespace {
// The hook's critical section is a few stores; a waiter yields instead of spinning hard (more
// threads than cores here).
void lock_spin(std::atomic_flag& f) {
  while (f.test_and_set(std::memory_order_acquire))
    std::this_thread::yield();
}
}  // namespace

MrCache::MrCache(size_t capacity_bytes, bool enabled, Register reg, Deregister dereg)
    : capacity_(capacity_bytes),
      enabled_(enabled),
      register_(std::move(reg)),
      deregister_(std::make_shared<Deregister>(std::move(dereg))) {}

MrCache::~MrCache() {
  clear();
}

std::shared_ptr<const MrCache::Region> MrCache::make(void* base, size_t length) {
  auto* r = new Region{nullptr, reinterpret_cast<uintptr_t>(base), length};
  if (length > 0) {
    try {
      r->handle = register_(base, length);
    } catch (...) {
      delete r;
      throw;
    }
    ++stats_.registrations;
  }
  std::shared_ptr<Deregister> dereg = deregister_;
  return std::shared_ptr<const Region>(r, [dereg](const Region* p) {
    if (p->handle) (*dereg)(p->handle);
    delete p;
  });
}

std::shared_ptr<const MrCache::Region> MrCache::get(void* base, size_t length) {
  std::lock_guard lock(mu_);
  apply_invalidations_locked();
  const auto lo = reinterpret_cast<uintptr_t>(base);
  const uintptr_t hi = lo + length;
  if (length > 0) {
    for (const auto& weak : pinned_) {
      if (auto r = weak.lock(); r && r->base <= lo && hi <= r->base + r->length) {
        ++stats_.hits;
        return r;
      }
    }
  }
  if (length == 0 || !enabled_) return make(base, length);
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const Region& r = **it;
    if (r.base <= lo && hi <= r.base + r.length) {
      lru_.splice(lru_.begin(), lru_, it);
      ++stats_.hits;
      return lru_.front();
    }
  }
  // The hook watches the range before it is registered: an unmap during the registration is
  // recorded, and the next get() drops the region.
  const Range pending{lo, hi};
  publish_locked(&pending);
  std::shared_ptr<const Region> region;
  try {
    region = make(base, length);
  } catch (...) {
    publish_locked();
    throw;
  }
  lru_.push_front(region);
  stats_.cached_bytes += length;
  // Least recently used first; the region just made stays even when alone above the cap.
  // The view already holds the new region; it changes only if older ones went.
  const size_t cached = lru_.size();
  while (stats_.cached_bytes > capacity_ && lru_.size() > 1) {
    stats_.cached_bytes -= lru_.back()->length;
    lru_.pop_back();
    ++stats_.evictions;
  }
  if (lru_.size() != cached) publish_locked();
  return region;
}

std::shared_ptr<const MrCache::Region> MrCache::pin(void* base, size_t length) {
  std::lock_guard lock(mu_);
  std::erase_if(pinned_, [](const auto& weak) { return weak.expired(); });
  std::shared_ptr<const Region> region = make(base, length);
  if (length > 0) pinned_.push_back(region);
  return region;
}

void MrCache::unpin_all() {
  std::lock_guard lock(mu_);
  for (const auto& weak : pinned_) {
    if (auto r = weak.lock(); r && r->handle) {
      (*deregister_)(r->handle);
      const_cast<Region&>(*r).handle = nullptr;  // its deleter then deregisters nothing
    }
  }
  pinned_.clear();
}

void MrCache::publish_locked(const Range* extra) {
  Range ranges[kTracked];
  size_t n = 0;
  bool complete = lru_.size() + (extra ? 1 : 0) <= kTracked;
  if (complete) {
    for (const auto& r : lru_)
      ranges[n++] = Range{r->base, r->base + r->length};
    if (extra) ranges[n++] = *extra;
    std::sort(ranges, ranges + n, [](const Range& a, const Range& b) { return a.lo < b.lo; });
  }
  lock_spin(spin_);
  view_complete_ = complete;
  view_used_ = n;
  uintptr_t reach = 0;
  for (size_t i = 0; i < n; ++i) {
    view_[i] = ranges[i];
    reach = std::max(reach, ranges[i].hi);
    reach_[i] = reach;
  }
  spin_.clear(std::memory_order_release);
}

bool MrCache::watched(uintptr_t lo, uintptr_t hi) const noexcept {
  if (!view_complete_) return true;
  // The last region starting below hi; some region up to it reaching past lo overlaps.
  const Range* end = std::lower_bound(view_, view_ + view_used_, hi,
                                      [](const Range& r, uintptr_t v) { return r.lo < v; });
  if (end == view_) return false;
  return reach_[end - view_ - 1] > lo;
}

void MrCache::invalidate(uintptr_t address, size_t length) noexcept {
  unmaps_seen_.fetch_add(1, std::memory_order_relaxed);
  if (!enabled_ || length == 0) return;
  const Range range{address, address + length};
  lock_spin(spin_);
  if (!watched(range.lo, range.hi)) {
    spin_.clear(std::memory_order_release);
    return;
  }
  unmaps_recorded_.fetch_add(1, std::memory_order_relaxed);
  if (ring_used_ < kRingSize) {
    ring_[ring_used_++] = range;
  } else {
    // Widen the entry that grows least: it may drop a neighbour that is still mapped (which
    // then registers again), never keep one that is not.
    size_t best = 0;
    uintptr_t best_growth = UINTPTR_MAX;
    for (size_t i = 0; i < kRingSize; ++i) {
      const uintptr_t lo = std::min(ring_[i].lo, range.lo);
      const uintptr_t hi = std::max(ring_[i].hi, range.hi);
      const uintptr_t growth = (hi - lo) - (ring_[i].hi - ring_[i].lo);
      if (growth < best_growth) {
        best_growth = growth;
        best = i;
      }
    }
    ring_[best] = Range{std::min(ring_[best].lo, range.lo), std::max(ring_[best].hi, range.hi)};
    ring_merges_.fetch_add(1, std::memory_order_relaxed);
  }
  pending_.store(true, std::memory_order_release);
  spin_.clear(std::memory_order_release);
}

void MrCache::collect() {
  if (!pending_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mu_);
  apply_invalidations_locked();
}

void MrCache::apply_invalidations_locked() {
  if (!pending_.load(std::memory_order_acquire)) return;
  Range ranges[kRingSize];
  size_t n = 0;
  lock_spin(spin_);
  n = ring_used_;
  for (size_t i = 0; i < n; ++i)
    ranges[i] = ring_[i];
  ring_used_ = 0;
  pending_.store(false, std::memory_order_release);
  spin_.clear(std::memory_order_release);
  // Regions dropped here are deregistered outside the hook, once their calls release them.
  const size_t before = lru_.size();
  for (size_t i = 0; i < n; ++i)
    drop_overlapping_locked(ranges[i].lo, ranges[i].hi, stats_.invalidations);
  if (lru_.size() != before) publish_locked();
}

void MrCache::drop_overlapping_locked(uintptr_t lo, uintptr_t hi, uint64_t& counter) {
  for (auto it = lru_.begin(); it != lru_.end();) {
    const Region& r = **it;
    if (r.base < hi && lo < r.base + r.length) {
      stats_.cached_bytes -= r.length;
      it = lru_.erase(it);
      ++counter;
    } else {
      ++it;
    }
  }
}

void MrCache::evict(uintptr_t address, size_t length) {
  if (length == 0) return;
  std::lock_guard lock(mu_);
  drop_overlapping_locked(address, address + length, stats_.invalidations);
  publish_locked();
}

void MrCache::disable() {
  enabled_ = false;
  clear();
}

void MrCache::clear() {
  std::lock_guard lock(mu_);
  lru_.clear();
  stats_.cached_bytes = 0;
  publish_locked();
}

MrCache::Stats MrCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.cached_regions = lru_.size();
  s.unmaps_seen = unmaps_seen_.load(std::memory_order_relaxed);
  s.unmaps_recorded = unmaps_recorded_.load(std::memory_order_relaxed);
  s.ring_merges = ring_merges_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace rdmacoll::transport
