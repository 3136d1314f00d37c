#include "engine/symmetric.hpp"

#include <map>
#include <mutex>

namespace rdmacoll::engine {

namespace {

struct Registry {
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

void publish(const std::shared_ptr<Window>& w) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.by_base[w->own->data()] = w;
}

std::shared_ptr<Window> find_window(const void* group, uint64_t digest, const void* p, size_t bytes,
                                    size_t& offset) {
  Registry& r = registry();
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
