#include "transport/verbs/mr_cache.hpp"

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
  if (length == 0 || !enabled_) return make(base, length);
  const auto lo = reinterpret_cast<uintptr_t>(base);
  const uintptr_t hi = lo + length;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const Region& r = **it;
    if (r.base <= lo && hi <= r.base + r.length) {
      lru_.splice(lru_.begin(), lru_, it);
      ++stats_.hits;
      return lru_.front();
    }
  }
  auto region = make(base, length);
  lru_.push_front(region);
  stats_.cached_bytes += length;
  // Least recently used first; the region just made stays even when alone above the cap.
  while (stats_.cached_bytes > capacity_ && lru_.size() > 1) {
    stats_.cached_bytes -= lru_.back()->length;
    lru_.pop_back();
    ++stats_.evictions;
  }
  return region;
}

void MrCache::invalidate(uintptr_t address, size_t length) noexcept {
  unmaps_seen_.fetch_add(1, std::memory_order_relaxed);
  if (!enabled_ || length == 0) return;
  lock_spin(spin_);
  if (ring_used_ < kRingSize) {
    ring_[ring_used_++] = Range{address, address + length};
  } else {
    ring_overflow_ = true;
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
  bool overflow = false;
  lock_spin(spin_);
  n = ring_used_;
  for (size_t i = 0; i < n; ++i)
    ranges[i] = ring_[i];
  overflow = ring_overflow_;
  ring_used_ = 0;
  ring_overflow_ = false;
  pending_.store(false, std::memory_order_release);
  spin_.clear(std::memory_order_release);
  // Regions dropped here are deregistered outside the hook, once their calls release them.
  if (overflow) {
    drop_overlapping_locked(0, UINTPTR_MAX, stats_.invalidations);
    return;
  }
  for (size_t i = 0; i < n; ++i)
    drop_overlapping_locked(ranges[i].lo, ranges[i].hi, stats_.invalidations);
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
}

void MrCache::disable() {
  enabled_ = false;
  clear();
}

void MrCache::clear() {
  std::lock_guard lock(mu_);
  lru_.clear();
  stats_.cached_bytes = 0;
}

MrCache::Stats MrCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.cached_regions = lru_.size();
  s.unmaps_seen = unmaps_seen_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace rdmacoll::transport
