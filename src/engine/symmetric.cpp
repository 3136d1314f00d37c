#include "engine/symmetric.hpp"

#include <atomic>
#include <map>
#include <mutex>

namespace rdmacoll::engine {

namespace {

struct Registry {
  // Set by the first publish: a process that never made a window looks up nothing (an
  // all-gather of 1 KiB and more asks on every call).
  std::atomic<bool> any{false};
  std::mutex mu;
  std::map<const uint8_t*, std::weak_ptr<Window>> by_base;  // our own part's address
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives every window, whatever the exit order
  return *r;
}

}  // namespace

Window::~Window() {
  if (!own) return;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.by_base.find(own->data());
  if (it != r.by_base.end() && it->second.expired()) r.by_base.erase(it);
}

void WindowPool::give_back(std::shared_ptr<Window> w) {
  std::shared_ptr<Window> oldest;  // unmapped outside the lock
  std::lock_guard lock(mu_);
  spare_.push_back(std::move(w));
  if (spare_.size() > kMaxSpare) {
    oldest = std::move(spare_.front());
    spare_.pop_front();
  }
}

std::vector<std::shared_ptr<Window>> WindowPool::hold(size_t bytes, size_t n) {
  std::vector<std::shared_ptr<Window>> held;
  std::lock_guard lock(mu_);
  for (size_t i = spare_.size(); i-- > 0 && held.size() < n;) {
    const size_t size = spare_[i]->own->size();
    if (size < bytes || size / 2 > bytes) continue;
    held.push_back(std::move(spare_[i]));
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return held;
}

void WindowPool::clear() {
  std::deque<std::shared_ptr<Window>> spare;  // unmapped outside the lock
  std::lock_guard lock(mu_);
  spare.swap(spare_);
}

void publish(const std::shared_ptr<Window>& w) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.by_base[w->own->data()] = w;
  r.any.store(true, std::memory_order_release);
}

std::shared_ptr<Window> find_window(const void* group, uint64_t digest, const void* p, size_t bytes,
                                    size_t& offset) {
  Registry& r = registry();
  if (!r.any.load(std::memory_order_acquire)) return nullptr;
  const auto* at = static_cast<const uint8_t*>(p);
  std::lock_guard lock(r.mu);
  auto it = r.by_base.upper_bound(at);
  if (it == r.by_base.begin()) return nullptr;
  --it;
  std::shared_ptr<Window> w = it->second.lock();
  if (!w || w->group != group || w->digest != digest) return nullptr;
  offset = static_cast<size_t>(at - w->own->data());
  if (offset > w->own->size() || bytes > w->own->size() - offset) return nullptr;
  return w;
}

}  // namespace rdmacoll::engine
