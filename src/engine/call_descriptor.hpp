#pragma once
// The control message each member sends every other member at the start of a collective call:
// "call #seq of group g: my output is at (address, key, length), these are my sizes and dtypes"
// or "I rejected my arguments because ...". Writers write only after they hold the receiver's
// descriptor for the same call, and never past its advertised length.

#include <cstdint>
#include <string>
#include <vector>

namespace rdmacoll::engine {

enum class CollectiveOp : uint8_t { AllGather = 1, Barrier = 2 };

struct CallDescriptor {
  uint64_t seq = 0;
  uint32_t group = 0;
  int32_t rank = -1;  // group rank of the sender
  CollectiveOp op = CollectiveOp::AllGather;
  bool ok = true;  // false: the sender rejected its own arguments; `error` says why
  uint8_t in_dtype = 0;
  uint8_t out_dtype = 0;
  uint64_t in_numel = 0;
  uint64_t out_numel = 0;
  uint64_t out_addr = 0;
  uint64_t out_bytes = 0;
  std::vector<uint8_t> key;
  std::string error;
  // Small calls carry the sender's chunk right here: one message round, no data phase.
  std::vector<uint8_t> inline_data;

  std::vector<uint8_t> serialize() const;
  // Throws TransportError on a malformed message.
  static CallDescriptor parse(const uint8_t* data, size_t length);
};

inline constexpr size_t kMaxDescriptorBytes = 4096;
// Chunks up to this size travel inline in the descriptor (header + key + error stay below
// the rest of kMaxDescriptorBytes).
inline constexpr size_t kMaxInlineBytes = 2048;

// Tags: kind (2 bits) | group (14) | seq (24) | index (24). Data tags carry the first chunk
// of the run, control tags the sender's group rank; both are unique per receiver and call.
enum class TagKind : uint64_t { Descriptor = 0, Data = 1 };

inline uint64_t make_tag(TagKind kind, uint32_t group, uint64_t seq, uint32_t index) {
  return (static_cast<uint64_t>(kind) << 62) | ((static_cast<uint64_t>(group) & 0x3fff) << 48) |
         ((seq & 0xffffff) << 24) | (index & 0xffffff);
}

}  // namespace rdmacoll::engine
