#pragma once
// The messages of point-to-point (p2p.cpp), pure data: their tags and wire formats, unit-tested
// and fuzzed apart from the state machines.
//
// A send opens with a data message to the receiver: the bytes themselves up to the inline
// limit, else a request to send (RTS) with the length. A receive of more than the inline limit
// sends the sender a clear-to-send (CTS) as soon as it is posted: where its buffer is (address,
// key, token) and how long; the sender writes the data there one-sided once it holds both. So a
// receive posted early (as pipelines post them) costs the sender no wait, and neither side
// reacts to the other except the sender to a CTS that comes after its send.
//
// Messages of one (sender, receiver, tag) are matched in order (the transports match a tag's
// messages first come, first served); each carries its sequence number on that channel, so a
// CTS left over from a receive that failed (a size mismatch) is recognized and dropped.
//
// A receive that refuses an inline message (the sizes differ) tells its sender too, with a
// refused clear-to-send on the sender's refusal tag: that send has completed, so the sender
// raises it at its next send to that rank in that group (not at a receive, which may be the
// very message that tells it the mismatch happened).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rdmacoll::engine::p2p {

// Tags: kind 3 (as TagKind::Piece) with bit 23 set, which no piece's index has:
//   kind (2) | group (14) | user tag (24) | 1 | direction (1) | sender's group rank (22)
// The sender's rank is in the tag because UCX matches tags across senders.
inline constexpr uint64_t kMaxUserTag = (uint64_t{1} << 24) - 1;
inline constexpr uint64_t kMaxRank = (uint64_t{1} << 22) - 1;
enum class Direction : uint64_t { Data = 0, ClearToSend = 1 };
uint64_t tag(uint32_t group, uint32_t user_tag, Direction direction, uint32_t from);
// Refusals of inline sends: kind 2 (as TagKind::Error) with bit 23 set, which no error
// report's sender rank has: kind (2) | group (14) | 0 (24) | 1 | 0 | receiver's group rank (22).
uint64_t refusal_tag(uint32_t group, uint32_t from);

enum class DataKind : uint32_t { Inline = 1, RequestToSend = 2 };
struct DataHeader {
  DataKind kind = DataKind::Inline;
  uint64_t bytes = 0;  // the send's length
  uint64_t seq = 0;    // its place on the (sender, receiver, tag) channel
};
inline constexpr size_t kDataHeaderBytes = 24;

struct ClearToSend {
  bool ok = true;  // false: the receiver refuses (`error` says why); nothing is written
  uint64_t bytes = 0;
  uint64_t seq = 0;
  uint64_t addr = 0;
  uint64_t token = 0;
  std::span<const uint8_t> key;  // views into the parsed buffer
  std::string_view error;
};
inline constexpr size_t kMaxClearToSendBytes = 2048;

// Writes a data header into out[0, kDataHeaderBytes).
void encode(const DataHeader& h, uint8_t* out);
// nullopt when `data` is not a data message (too short, bad magic or kind).
std::optional<DataHeader> parse_data(std::span<const uint8_t> data);

std::vector<uint8_t> encode(const ClearToSend& c);
std::optional<ClearToSend> parse_clear_to_send(std::span<const uint8_t> data);

}  // namespace rdmacoll::engine::p2p
