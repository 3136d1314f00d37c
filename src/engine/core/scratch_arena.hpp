#pragma once
// Buffers a group's calls reuse, so that a small call allocates nothing: each owner (a
// collective, the descriptor exchange, the data phase's writes) declares a struct of its own in
// its own file and takes it with `arena.get<Its>()`. A struct is made the first time its owner
// asks, once per group; later calls get the same one back (a scan of a few slots, no
// allocation). Calls of one group never overlap (its queue runs them one at a time, and a failed
// call leaves the group unusable), so one of each per group is enough.

#include <array>
#include <cstddef>
#include <memory>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

class ScratchArena {
 public:
  template <typename T>
  T& get() {
    const void* const key = &kKey<T>;
    for (size_t i = 0; i < used_; ++i) {
      if (slots_[i].key == key) return *static_cast<T*>(slots_[i].object.get());
    }
    if (used_ == slots_.size()) throw Error("internal: a group's scratch arena is full");
    Slot& s = slots_[used_++];
    s.key = key;
    s.object = Owned(new T(), [](void* p) { delete static_cast<T*>(p); });
    return *static_cast<T*>(s.object.get());
  }
  // The owner's struct if it has asked for it before, else null.
  template <typename T>
  const T* find() const {
    for (size_t i = 0; i < used_; ++i) {
      if (slots_[i].key == &kKey<T>) return static_cast<const T*>(slots_[i].object.get());
    }
    return nullptr;
  }

 private:
  // One address per type (an inline variable is one object in the whole program).
  template <typename T>
  static constexpr char kKey = 0;
  using Owned = std::unique_ptr<void, void (*)(void*)>;
  struct Slot {
    const void* key = nullptr;
    Owned object{nullptr, [](void*) {}};
  };
  // More than the owners there are (about ten); a new owner past it raises in every test.
  std::array<Slot, 24> slots_;
  size_t used_ = 0;
};

}  // namespace rdmacoll::engine
