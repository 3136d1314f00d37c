#pragma once
// Symmetric memory (rdmacoll::empty): a window is one allocation made together by every member
// of a group on one host, each member's part mapped by every member, so a collective whose
// output lies in a window stores straight into its peers' outputs (one copy, no cross-memory
// attach, no registration). The registry finds the window an output lies in; it holds windows
// weakly, so a window goes with its last tensor.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/shared_segment.hpp"

namespace rdmacoll::engine {

struct Window {
  uint64_t id = 0;              // the group's n-th window: the same on every member
  const void* group = nullptr;  // the GroupState it was made on, and that group's digest
  uint64_t digest = 0;
  std::unique_ptr<transport::SharedSegment> own;
  std::vector<std::unique_ptr<transport::SharedSegment>> peers;  // by group rank; ours empty
  std::vector<uint8_t*> base;  // every member's part as mapped here, by group rank

  ~Window();
};

// Makes `w` findable (every member mapped every part).
void publish(const std::shared_ptr<Window>& w);
// The published window of `group` (with `digest`) holding [p, p + bytes), and p's offset in
// it; nullptr if none.
std::shared_ptr<Window> find_window(const void* group, uint64_t digest, const void* p, size_t bytes,
                                    size_t& offset);

}  // namespace rdmacoll::engine
