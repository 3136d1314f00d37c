#pragma once
// Eager slots over verbs: the control messages of a connected pair (call descriptors, and with
// them a small call's whole chunk) go by plain RDMA WRITE into a ring of pre-registered slots at
// the receiver, as the mailbox in shared memory does on one host (engine/control/mailbox.hpp)
// and as MVAPICH's RDMA fast path does between hosts. The receiver polls its ring's next slot in
// progress(): no receive work request, no receive completion, no receive buffer between the wire
// and the slot: a write's latency is below a SEND's (perftest, docs/performance.md, the code's
// thresholds); on HCAs the gap is the receive WQE the NIC fetches for a SEND.
//
// A plain write wakes no one, and a receiver sleeps in poll() when it has spun long enough (it
// must: more ranks than cores). So before it sleeps, a receiver with rings writes a new sleep
// epoch into each ring peer's block. It may sleep at once: those writes' completions wake it,
// and it looks at its rings again after they have completed. A sender looks at the receiver's epoch
// after each eager write has completed (landed), and if the epoch is one it has not woken yet, it
// rings: a zero-byte write with an immediate (kImm), whose completion wakes the receiver. Each side
// writes, waits for its write to land, then reads the other's word (Dekker's handshake): either the
// receiver's last look finds the message or the sender finds the epoch. The epoch only grows, so a
// sender rings at most once per sleep; a receiver woken by a ring announces anew before it sleeps
// again.
//
// Flow control by credits: every message carries how many of the peer's messages its sender has
// taken, so where both sides send (every all-gather round) credits cost nothing; a receiver that
// has taken half a ring without sending writes the count into the sender's block instead, on
// the QP's urgent queue (never behind messages that wait for credits). A sender without a free
// slot waits for one: it does not fall back to a SEND, since a SEND may overtake the slots'
// messages and point-to-point messages of one tag are matched in the order they were sent.
//
// This file is the framing and the block's layout, as pure functions (unit-tested and fuzzed);
// the rings, credits and epochs live in eager_channel.hpp.
//
// A slot: the message's number (8 bytes; the first message is 1), its length (2), the receive
// credit (2: the low 16 bits of how many of the reader's receive-taking requests the writer's
// queue has taken, receive_credits.hpp), the credit (4: the low half of how many of the
// reader's messages the writer has taken), its tag (8), the
// payload rounded up to 8 bytes, then a trailer: the number XOR a 64-bit checksum of everything
// between head and trailer. The receiver trusts a slot once the head carries the number it
// expects and the trailer matches what it computes over the bytes in the slot. No landing order
// is assumed: InfiniBand gives none within a message, and adaptive routing (NCCL enables it by
// default) or RoCE packet spraying deliver a multi-packet write's packets in any order, so a
// trailer may land before a middle packet; the checksum then fails and the reader looks again.
// A slot's previous message never passes for the next one: its head carries another number.
// Cost: one multiply per 8 bytes on each side.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "common/settings.hpp"

namespace rdmacoll::transport::eager_ring {

constexpr size_t kHeaderBytes = 24;
constexpr size_t kTrailerBytes = 8;
// Sixty-eight cache lines: the header, the largest control message (verbs_plan::kCtrlBytes, a
// tag included, which the header carries instead) and the trailer, rounded up.
constexpr size_t kSlotBytes = 4352;
constexpr size_t kMaxPayload = kSlotBytes - kHeaderBytes - kTrailerBytes;
// Slots per peer (RDMACOLL_IB_EAGER_SLOTS): a call sends one or two messages to a peer, and a
// credit comes back every half ring, so eight keep a pair of back-to-back callers off SENDs.
constexpr int kDefaultSlots = static_cast<int>(settings::kIbEagerSlots.value);
constexpr int kMaxSlots = static_cast<int>(settings::kIbEagerSlots.max);
// The immediate of a ring (the wake-up): bit 23, which the data writes' immediates leave
// clear.
constexpr uint32_t kImm = uint32_t{1} << 23;
constexpr size_t kLine = 64;

constexpr size_t round8(size_t n) {
  return (n + 7) / 8 * 8;
}
// The full count from a credit's low half, for a sender that has sent `sent` messages: the
// count lies in [sent - slots, sent], so the 32-bit difference recovers it.
constexpr uint64_t widen_credit(uint32_t credit, uint64_t sent) {
  return sent - static_cast<uint32_t>(static_cast<uint32_t>(sent) - credit);
}
// The full receive count from its low 16 bits, for a sender that has made `used` receive-taking
// requests: the count lies within its grant (at most 8) below `used`, or a little further for
// a message posted just before a credit write that landed first.
constexpr uint64_t widen_receives(uint16_t receives, uint64_t used) {
  return used - static_cast<uint16_t>(static_cast<uint16_t>(used) - receives);
}
// Bytes of a message of `length` payload bytes in its slot.
constexpr size_t framed_bytes(size_t length) {
  return kHeaderBytes + round8(length) + kTrailerBytes;
}
// A block: the ring of `slots` slots, then a line each for the credit the peer writes in (how
// many of our messages it has taken), the credit we write out (the source of our credit
// writes), the sleep epoch the peer writes in, the epoch we write out, and the receive credits
// (receive_credits.hpp) the peer writes in and we write out. Every connected peer has a block,
// with no slots where eager slots are off: the receive credits travel through it.
constexpr size_t credit_in_offset(int slots) {
  return static_cast<size_t>(slots) * kSlotBytes;
}
constexpr size_t credit_out_offset(int slots) {
  return credit_in_offset(slots) + kLine;
}
constexpr size_t epoch_in_offset(int slots) {
  return credit_in_offset(slots) + 2 * kLine;
}
constexpr size_t epoch_out_offset(int slots) {
  return credit_in_offset(slots) + 3 * kLine;
}
constexpr size_t receives_in_offset(int slots) {
  return credit_in_offset(slots) + 4 * kLine;
}
constexpr size_t receives_out_offset(int slots) {
  return credit_in_offset(slots) + 5 * kLine;
}
constexpr size_t block_bytes(int slots) {
  return credit_in_offset(slots) + 6 * kLine;
}

// Frames message number `number` into `out`, which holds framed_bytes(length) bytes.
void pack(uint8_t* out, uint64_t number, uint64_t tag, const void* data, size_t length,
          uint32_t credit = 0, uint16_t receives = 0);

struct Message {
  uint64_t tag = 0;
  uint32_t credit = 0;
  uint16_t receives = 0;
  std::span<const uint8_t> payload;  // inside the slot
};
// Message `number` if it has landed whole in `slot` (kSlotBytes, written by the peer's NIC),
// nullopt while it has not. Throws TransportError when the head says `number` with a length no
// slot holds: a peer that writes that is broken or hostile.
std::optional<Message> read(const uint8_t* slot, uint64_t number);

}  // namespace rdmacoll::transport::eager_ring
