#pragma once
// The control message each member sends every other member at the start of a collective call:
// "call #seq of group g: my output is at (address, key, length), these are my sizes and dtypes"
// or "I rejected my arguments because ...". Writers write only after they hold the receiver's
// descriptor for the same call, and never past its advertised length.
//
// Small calls carry the sender's chunk in the same message (the eager path): one message round
// and no registration. On the hot path nothing here allocates: a parsed descriptor's key, error
// and inline data are views into the buffer it was parsed from, and serialize_into() reuses
// its output's capacity.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rdmacoll::engine {

struct CallDescriptor {
  uint64_t seq = 0;
  uint32_t group = 0;
  int32_t rank = -1;       // group rank of the sender
  uint8_t collective = 0;  // the call's Collective::code (core/collective.hpp)
  bool ok = true;          // false: the sender rejected its own arguments; `error` says why
  // A rooted exchange's verdict (control_plane.hpp, exchange_rooted): the root refused the call
  // for the reason in `error`; what its members raise, and whether the root's group broke.
  enum class Refusal : uint8_t { None = 0, InvalidArgument = 1, TransportError = 2 };
  Refusal refused = Refusal::None;
  bool group_broken = false;  // with a refusal: the root marked the group unusable
  uint8_t in_dtype = 0;
  uint8_t out_dtype = 0;
  uint64_t in_numel = 0;
  uint64_t out_numel = 0;
  uint64_t out_addr = 0;
  uint64_t out_bytes = 0;
  // The token the sender reserved for this call's writes to it (transport.hpp, reserve_token):
  // whoever writes to the sender puts it in the write's signal.
  uint64_t signal_token = 0;
  // all_reduce runs as segments of gathers: the whole tensor's length and the operator travel
  // with every segment, so a disagreement raises before the first segment is reduced.
  uint64_t total_numel = 0;
  uint8_t reduce_op = 0;
  int32_t root = 0;  // broadcast: the source's group rank
  // Which group the sender means: its world rank, and its group's size, creation number (the
  // n-th new_group) and digest of members and creation. A rank that made its groups otherwise
  // (other members, a skipped new_group) can reach us under the same tag; it is refused.
  int32_t global_rank = -1;
  uint32_t group_size = 0;
  uint64_t group_creation = 0;
  uint64_t group_digest = 0;
  // Views: into the parsed buffer, or (for our own descriptor) into memory the caller keeps
  // alive until serialize_into() returns.
  std::span<const uint8_t> key;
  std::string_view error;  // at most kMaxErrorBytes travel
  std::span<const uint8_t> inline_data;
  // Not sent: inline_data is one piece of this many bytes per member, in rank order. Through the
  // mailbox each peer's slot takes only its own piece (reduce_scatter's p-fold saving); as
  // messages every peer gets the whole, so a reader finds its piece by the length it got.
  size_t inline_piece = 0;
  // all_to_all: the sender's p input splits then its p output splits, in elements (2 p
  // little-endian uint64), so that every rank checks every pair's sizes (all_to_all.cpp).
  std::span<const uint8_t> splits;
  // all_gather into symmetric memory (engine/symmetric.hpp): the window the sender's output
  // lies in (0: none) and where in it. The data path is taken only when every member names the
  // same window and offset.
  uint64_t window = 0;
  uint64_t window_offset = 0;
  // Setting up the group's mailbox (engine/control/mailbox.hpp): the sender's slot memory
  // (first call), then whether the sender mapped every peer's (second call).
  uint64_t slot_addr = 0;
  std::span<const uint8_t> slot_key;
  uint32_t slot_capacity = 0;  // the slot layout's descriptor capacity: all must agree
  bool slots_mapped = false;
  // ... and (second call) whether the sender could read every peer's memory (a probe of its
  // slot memory through Transport::read_peer): peers then copy chunks out of each other's.
  bool peers_readable = false;
  // A call whose peers read its chunk (engine/collectives/all_gather.cpp): where the sender's
  // chunk lies in its own address space (0: not offered).
  uint64_t source_addr = 0;

  size_t serialized_size() const;
  // Writes the message to dst[0, size) and returns its size; throws TransportError if it
  // would exceed `capacity` bytes.
  size_t serialize_to(uint8_t* dst, size_t capacity) const;
  // Replaces `out` with the message; throws TransportError if it would exceed `limit` bytes.
  void serialize_into(std::vector<uint8_t>& out, size_t limit) const;
  std::vector<uint8_t> serialize() const;  // for tests: no limit
  // Throws TransportError on a malformed message. The result views `data`.
  static CallDescriptor parse(const uint8_t* data, size_t length);
  // The call number of a serialized descriptor without parsing the rest; false when `data`
  // does not start like one. Leftovers of a failed call are found so
  // (engine/control/descriptor_messages.cpp).
  static bool peek_seq(const uint8_t* data, size_t length, uint64_t& seq);
};

inline constexpr size_t kMaxErrorBytes = 1024;
// Header, key and error together stay below this; inline data comes on top.
inline constexpr size_t kMaxDescriptorBytes = 4096;

// Largest chunk that travels inline, for a group of p ranks on `hosts` hosts over a transport
// whose control messages carry at most `max_message` bytes. Every rank computes the same value
// (same group, same transport), so all agree on the path. Inline chunks go straight to every
// member in one round, so:
//  - receive buffers take p x (limit + header): the limit shrinks as groups grow (64 KiB up to
//    16 ranks, 1 MiB / p beyond, never under 2 KiB) and is at most half a control message;
//  - across hosts the direct round sends k times the off-host bytes of the topology-aware
//    schedule (k ranks per host), so groups spanning hosts keep 2 KiB.
// `forced` (RDMACOLL_EAGER_LIMIT, the group's tuning: bytes, for measurements; every rank sets
// the same) overrides it.
size_t eager_limit(int p, int hosts = 1, size_t max_message = SIZE_MAX,
                   std::optional<size_t> forced = std::nullopt);

// What travels with an inline chunk: the header and the keys (a group's first call carries
// its eager-slot key; slots are not offered with a key beyond kMaxSlotKeyBytes). It was 128
// bytes, and a chunk of exactly the eager limit on a group's first call did not fit beside a
// 29-byte shared-memory key: the root raised alone and its peers timed out (found by
// tests/chaos).
inline constexpr size_t kMaxSlotKeyBytes = 512;
inline constexpr size_t kInlineOverhead = 1024;

// Room a descriptor receive buffer needs when chunks up to `limit` travel inline.
inline size_t descriptor_capacity(size_t limit) {
  return limit + kInlineOverhead > kMaxDescriptorBytes ? limit + kInlineOverhead
                                                       : kMaxDescriptorBytes;
}

// Control tags: kind (2 bits) | group (14) | seq (24) | index (24): the sender's group rank,
// unique per receiver and call. Error: a call's error spread to the ring neighbours
// (engine/control/ring_guard.hpp, RingGuard::spread); with bit 23 set, point-to-point's
// refusals (p2p_messages.hpp), as kind 3 with bit 23 is its messages. Kind 1 is the data writes'
// (transport::write_signal, chosen by the receiver). Piece: a piece of a call's data sent as a
// control message, where the receiver exposed no memory for it (all_to_all.cpp).
enum class TagKind : uint64_t { Descriptor = 0, Error = 2, Piece = 3 };

inline uint64_t make_tag(TagKind kind, uint32_t group, uint64_t seq, uint32_t index) {
  return (static_cast<uint64_t>(kind) << 62) | ((static_cast<uint64_t>(group) & 0x3fff) << 48) |
         ((seq & 0xffffff) << 24) | (index & 0xffffff);
}

}  // namespace rdmacoll::engine
