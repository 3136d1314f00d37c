#pragma once
// The mailbox (each member's eager slots): per-group shared memory into which every peer stores its
// call descriptor (and with it a small call's whole chunk), so a call on one host needs no message
// at all. Each member allocates one region through the transport and peers map it; a sender then
// copies its descriptor into its slot and publishes it by storing a flag, and the receiver polls
// its own memory. A descriptor whose inline data is one piece per member
// (CallDescriptor::inline_piece, reduce_scatter's) puts only the reader's piece into each slot.
// This is the pre-registered-slot eager path (Open MPI's fast boxes, NCCL's LL
// buffers); UCX provides and maps the shared memory.
//
// Set-up rides on the group's first two calls, which use messages: call #0 carries each
// member's region key; call #1 says whether the member mapped every peer's region, and whether
// it could read every peer's memory (peer_reads()). Every rank sees the same descriptors, so
// all switch to slots from call #2 on, or none does, and likewise for the reads.
//
// Slot reuse: a sender writes slot (its rank, seq % 2) of call seq. It can reach call seq + 2
// only after the receiver sent it call seq + 1's descriptor, which the receiver does only
// after it has finished reading call seq. So two slots per sender never overwrite unread data.
//
// Region layout: a control line (the owner's `sleeping` word), then for every sender s and
// parity q a slot of slot_bytes(): a 64-byte header (flag = seq + 1 once complete, length,
// and in parity 0's the sender's `mapped` word), then the serialized descriptor.
//
// The record: a small call's descriptor carried in its flag's line. Past the set-up a call's
// descriptor differs between members in its sender, its sizes and its inline chunk only where
// no output is exposed (the inline paths and barrier): everything else names the group, which
// the slots already do. Such a descriptor travels as a record in the header line (operator,
// dtypes, root, element counts, and a chunk of up to 8 bytes; a longer one in the lines after
// it), flagged in the length word, so the reader takes the call from one or two lines where the
// serialized descriptor is three lines of fixed fields after the flag's. The reader rebuilds
// the whole descriptor from the record and its own group, so the agreement checks see what they
// always see and their errors stay as precise.
//
// Freeing: a region may go once no peer can still be about to map it (UCX 1.13 crashes when it
// unpacks the key of shared memory that is gone). Each peer sets its `mapped` word in our region
// right after mapping it, so a group destroyed during the set-up (used once) frees its region as
// soon as every peer's word is set; until then the region waits in a list swept at every
// release and set-up.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/call_descriptor.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

class Mailbox {
 public:
  enum class State { Unset, Mapping, Active, Off };
  static constexpr size_t kLine = 64;

  static size_t slot_bytes(size_t capacity) {
    return kLine + (capacity + kLine - 1) / kLine * kLine;
  }
  static size_t region_bytes(int p, size_t capacity) {
    return kLine + static_cast<size_t>(p) * 2 * slot_bytes(capacity);
  }
  static size_t slot_offset(int sender, uint64_t seq, size_t capacity) {
    return kLine + (static_cast<size_t>(sender) * 2 + (seq & 1)) * slot_bytes(capacity);
  }

  State state() const { return state_; }
  bool active() const { return state_ == State::Active; }
  // Every member can copy out of every other's memory (Transport::read_peer), as the set-up's
  // second call agreed: a call may then offer its chunk for its peers to read.
  bool peer_reads() const { return state_ == State::Active && peer_reads_; }
  size_t capacity() const { return capacity_; }

  // A group spanning hosts takes no slots: its members cannot all map each other's memory
  // (ranks that only name distinct hosts on one machine could, and then measured one host's
  // path), and its calls need not spend their first two on the set-up, whose descriptors
  // must reach every member where a ring call's reach only its neighbours.
  void off_across_hosts() {
    if (state_ == State::Unset) state_ = State::Off;
  }

  // Message path only: adds this call's set-up fields to our descriptor. `members` are the
  // group's global ranks, `capacity` its descriptor capacity.
  void annotate(transport::Transport& t, int p, size_t capacity, CallDescriptor& mine);
  // Message path only, after every descriptor arrived: moves the set-up along. Every rank
  // decides alike from the same descriptors.
  void advance(transport::Transport& t, const std::vector<int>& members, int my_rank,
               const std::vector<CallDescriptor>& all);

  // The group is going: unmaps the peers' regions and frees ours once no peer can still be
  // about to map it (every member's second call said it had mapped, nobody offered, or every
  // peer's `mapped` word is set); before that it waits for the words in the sweep's list, and
  // the transport keeps it to the transport's end at the latest.
  void release(const std::shared_ptr<transport::Transport>& t);

  uint8_t* local_slot(int sender, uint64_t seq) const {
    return local_ + slot_offset(sender, seq, capacity_);
  }
  uint8_t* remote_slot(int peer, int sender, uint64_t seq) const {
    return peers_[peer] + slot_offset(sender, seq, capacity_);
  }
  static std::atomic_ref<uint64_t> flag(uint8_t* slot) {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot));
  }
  static uint64_t& length(uint8_t* slot) { return *reinterpret_cast<uint64_t*>(slot + 8); }
  static uint64_t length(const uint8_t* slot) {
    return *reinterpret_cast<const uint64_t*>(slot + 8);
  }
  // The length word of a slot holding a record: this bit, and the inline chunk's length.
  static constexpr uint64_t kRecordBit = uint64_t{1} << 63;
  static constexpr size_t kRecordAt = 24;     // the record's place in the header line
  static constexpr size_t kRecordInline = 8;  // a chunk this short stays in the header line
  // Whether `d` can travel as a record in a slot of `capacity` descriptor bytes.
  static bool fits_record(const CallDescriptor& d, size_t capacity);
  // Writes `d` (fits_record) as a record into `slot`, length word included; the flag is the
  // caller's, after.
  static void write_record(uint8_t* slot, const CallDescriptor& d);
  // Reads the record of `slot` into `d`: the fields it carries, the inline chunk viewing the
  // slot. False if its chunk claims more than `capacity` bytes. The sender, the call and the
  // group are the reader's to stamp.
  static bool read_record(const uint8_t* slot, size_t capacity, CallDescriptor& d);

  // Set by `sender` in the owner's region once it has mapped it (slot (sender, 0)'s header).
  static std::atomic_ref<uint64_t> mapped(uint8_t* region, int sender, size_t capacity) {
    return std::atomic_ref<uint64_t>(
        *reinterpret_cast<uint64_t*>(region + slot_offset(sender, 0, capacity) + 16));
  }
  // The word a blocked owner sets to seq + 1, so that writers ring its doorbell.
  std::atomic_ref<uint64_t> local_sleeping() const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(local_));
  }
  std::atomic_ref<uint64_t> remote_sleeping(int peer) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(peers_[peer]));
  }

 private:
  void unmap_peers(transport::Transport& t);
  void free_region(transport::Transport& t);

  State state_ = State::Unset;
  size_t capacity_ = 0;
  std::shared_ptr<transport::MemoryRegion> region_;
  transport::Bytes key_;
  uint8_t* local_ = nullptr;
  std::vector<uint8_t*> peers_;  // each member's region as mapped here (ours for our rank)
  int p_ = 0, my_rank_ = -1;
  bool mapped_all_ = false;
  bool readable_all_ = false;  // we could read every peer's region (sent with the second call)
  bool peer_reads_ = false;
};

}  // namespace rdmacoll::engine
