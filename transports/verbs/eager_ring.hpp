#pragma once
// Eager slots over verbs: the control messages of a connected pair (call descriptors, and with
// them a small call's whole chunk) go by RDMA WRITE into a ring of pre-registered slots at the
// receiver, as the eager slots in shared memory do on one host (engine/eager_slots.hpp) and as
// MVAPICH's RDMA fast path does between hosts. The receiver polls its ring's next slot in
// progress(), so a spinning receiver takes the message as soon as it has landed, with no
// receive buffer between the wire and the slot. Each write carries an immediate as well (kImm):
// its completion wakes a receiver that sleeps in poll() (it must: more ranks than cores), and
// proves the slot whole, since a write's data is placed before its completion. A plain write
// could not wake a sleeper, and the writer cannot see that the reader sleeps without a round
// trip.
//
// Flow control by credits: the receiver writes back how many messages it has taken (a counter
// in the sender's block) every half ring; a sender without a free slot sends the message as
// before (SEND into the shared receive queue), so nothing waits for credits. Messages are
// matched by tag, so a message that overtakes another on the other path is harmless.
//
// This file is the framing, as pure functions (unit-tested and fuzzed); the rings, credits and
// immediates live in verbs_transport.cpp.
//
// A slot: the message's number (8 bytes; the first message is 1), its length (4), 4 reserved,
// its tag (8), the payload rounded up to 8 bytes, then the number again as a trailer. The
// receiver trusts a slot once head and trailer both carry the number it expects: an RC write
// lands in address order on the HCAs the fast path has always relied on, and the ring's memory
// is registered without relaxed ordering, so the trailer lands last. Numbers only grow, so a
// slot's previous message never passes for the next one.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace rdmacoll::transport::eager_ring {

constexpr size_t kHeaderBytes = 24;
constexpr size_t kTrailerBytes = 8;
// Sixty-eight cache lines: the header, the largest control message (verbs_plan::kCtrlBytes, a
// tag included, which the header carries instead) and the trailer, rounded up.
constexpr size_t kSlotBytes = 4352;
constexpr size_t kMaxPayload = kSlotBytes - kHeaderBytes - kTrailerBytes;
// Slots per peer (RDMACOLL_IB_EAGER_SLOTS): a call sends one or two messages to a peer, and a
// credit comes back every half ring, so eight keep a pair of back-to-back callers off SENDs.
constexpr int kDefaultSlots = 8;
constexpr int kMaxSlots = 64;
// The immediate of an eager write: bit 23, which the data writes' signal_imm32() leaves clear.
constexpr uint32_t kImm = uint32_t{1} << 23;
constexpr size_t kLine = 64;

constexpr size_t round8(size_t n) {
  return (n + 7) / 8 * 8;
}
// Bytes of a message of `length` payload bytes in its slot.
constexpr size_t framed_bytes(size_t length) {
  return kHeaderBytes + round8(length) + kTrailerBytes;
}
// A ring of `slots` slots and, after them, a line for the credit the peer writes into it (how
// many of our messages it has taken) and a line for the credit we write out (the source of our
// credit writes, registered with the ring).
constexpr size_t credit_in_offset(int slots) {
  return static_cast<size_t>(slots) * kSlotBytes;
}
constexpr size_t credit_out_offset(int slots) {
  return credit_in_offset(slots) + kLine;
}
constexpr size_t block_bytes(int slots) {
  return slots > 0 ? credit_out_offset(slots) + kLine : 0;
}

// Frames message number `number` into `out`, which holds framed_bytes(length) bytes.
void pack(uint8_t* out, uint64_t number, uint64_t tag, const void* data, size_t length);

struct Message {
  uint64_t tag = 0;
  std::span<const uint8_t> payload;  // inside the slot
};
// Message `number` if it has landed whole in `slot` (kSlotBytes, written by the peer's NIC),
// nullopt while it has not. Throws TransportError when the head says `number` with a length no
// slot holds: a peer that writes that is broken or hostile.
std::optional<Message> read(const uint8_t* slot, uint64_t number);

}  // namespace rdmacoll::transport::eager_ring
