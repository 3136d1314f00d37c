#pragma once
// Where the public API's list forms (all_gather into a list, all_to_all of lists) gather before
// copying out: one of the group's kept buffers (ListScratch, in the group's scratch arena; calls
// on a group never overlap), not a fresh allocation per call, whose pages would fault in and be
// zeroed by the kernel on every call from 32 MiB up. A buffer past kKeepBytes goes back after the
// call.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdmacoll::api {

// The list forms' buffers, kept by the group (engine/core/scratch_arena.hpp).
struct ListScratch {
  std::vector<uint8_t> in, out;
};

class Staging {
 public:
  static constexpr size_t kKeepBytes = size_t{256} << 20;

  Staging(std::vector<uint8_t>& buffer, size_t bytes) : buffer_(buffer) {
    // At least one byte: an empty list still hands the engine an address.
    if (buffer_.size() < std::max<size_t>(bytes, 1)) buffer_.resize(std::max<size_t>(bytes, 1));
  }
  ~Staging() {
    if (buffer_.capacity() > kKeepBytes) std::vector<uint8_t>().swap(buffer_);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  uint8_t* data() { return buffer_.data(); }

 private:
  std::vector<uint8_t>& buffer_;
};

}  // namespace rdmacoll::api
