#pragma once
// Symmetric memory (rdmacoll::empty): a window is one allocation made together by every member
// of a group on one host, each member's part mapped by every member, so a collective whose
// output lies in a window stores straight into its peers' outputs (one copy, no cross-memory
// attach, no registration). The registry finds the window an output lies in; it holds windows
// weakly, so a window goes with its last tensor. Across hosts a member's part is its own
// memory, registered with the NIC once when it is made (verbs), not on every call.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/shared_segment.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

struct Window {
  uint64_t id = 0;              // the group's n-th window: the same on every member
  const void* group = nullptr;  // the GroupState it was made on, and that group's digest
  uint64_t digest = 0;
  std::unique_ptr<transport::SharedSegment> own;
  std::vector<std::unique_ptr<transport::SharedSegment>> peers;  // by group rank; ours empty
  std::vector<uint8_t*> base;  // every member's part as mapped here, by group rank
  // Across hosts (never published): our part registered once, so that calls on it register
  // nothing (Transport::pin_memory). Declared after `own`: it goes before the memory does.
  std::shared_ptr<transport::MemoryRegion> pinned;

  ~Window();
};

// A group's published windows whose tensors this member has all dropped, still mapped, for the
// next empty() on the group: making a window costs two more rounds, a memfd, a mapping per
// member and first-touch faults on every page, several times the gather it serves
// (docs/performance.md). A window is reused only when every member offers it, so a member
// still using its part is never handed to another tensor. Dropped tensors come back on any
// thread.
class WindowPool {
 public:
  static constexpr size_t kMaxSpare = 8;  // the oldest beyond these are unmapped

  void give_back(std::shared_ptr<Window> w);
  // Up to `n` spare windows of at least `bytes` and at most twice that, newest first, taken out
  // of the pool (what the caller does not keep it gives back).
  std::vector<std::shared_ptr<Window>> hold(size_t bytes, size_t n);
  void clear();

 private:
  std::mutex mu_;
  std::deque<std::shared_ptr<Window>> spare_;  // oldest first
};

// Makes `w` findable (every member mapped every part).
void publish(const std::shared_ptr<Window>& w);
// The published window of `group` (with `digest`) holding [p, p + bytes), and p's offset in
// it; nullptr if none.
std::shared_ptr<Window> find_window(const void* group, uint64_t digest, const void* p, size_t bytes,
                                    size_t& offset);

}  // namespace rdmacoll::engine
