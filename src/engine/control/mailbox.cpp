#include "engine/control/mailbox.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string_view>

#include "common/log.hpp"
#include "engine/core/descriptor_fields.hpp"

namespace rdmacoll::engine {

namespace {

// Regions of groups released during the set-up, waiting for their peers' `mapped` words. Weak
// references: the transport owns the regions and frees them all at its end.
class WaitingRegions {
 public:
  struct Entry {
    std::weak_ptr<transport::Transport> transport;
    std::weak_ptr<transport::MemoryRegion> region;
    uint8_t* local;
    int p, my_rank;
    size_t capacity;
  };

  static WaitingRegions& instance() {
    static auto* waiting = new WaitingRegions;  // never destroyed: groups outlive statics
    return *waiting;
  }

  void add(Entry e) {
    std::lock_guard lock(mu_);
    entries_.push_back(std::move(e));
  }

  // Frees every region whose peers have all mapped it; forgets those whose transport is gone.
  void sweep() {
    std::lock_guard lock(mu_);
    std::erase_if(entries_, [](const Entry& e) {
      auto t = e.transport.lock();
      auto region = e.region.lock();
      if (!t || !region) return true;
      for (int r = 0; r < e.p; ++r) {
        if (r != e.my_rank &&
            Mailbox::mapped(e.local, r, e.capacity).load(std::memory_order_acquire) == 0)
          return false;
      }
      t->free_mappable(region);
      return true;
    });
  }

 private:
  std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace

void Mailbox::annotate(transport::Transport& t, int p, size_t capacity, CallDescriptor& mine) {
  if (state_ == State::Unset) {
    WaitingRegions::instance().sweep();
    p_ = p;
    capacity_ = capacity;
    region_ = t.allocate_mappable(region_bytes(p, capacity));
    if (region_ && region_->packed_key().size() > kMaxSlotKeyBytes) {
      t.free_mappable(region_);  // no peer has seen it
      region_.reset();
    }
    if (region_) {
      key_ = region_->packed_key();
      local_ = static_cast<uint8_t*>(region_->base());
      mine.slot_addr = reinterpret_cast<uint64_t>(local_);
      mine.slot_key = key_;
      mine.slot_capacity = static_cast<uint32_t>(capacity_);
    }
  } else if (state_ == State::Mapping) {
    mine.slots_mapped = mapped_all_;
    mine.peers_readable = readable_all_;
  }
}

void Mailbox::unmap_peers(transport::Transport& t) {
  for (uint8_t* peer : peers_) {
    if (peer && peer != local_) t.unmap_remote(peer);
  }
  peers_.clear();
}

void Mailbox::free_region(transport::Transport& t) {
  if (region_) t.free_mappable(region_);
  region_.reset();
  local_ = nullptr;
  state_ = State::Off;
}

void Mailbox::release(const std::shared_ptr<transport::Transport>& t) {
  unmap_peers(*t);
  // Active or Off: every member is past mapping (Off from Unset: nobody maps). Otherwise the
  // peers' `mapped` words say when it may go.
  if (region_ && state_ != State::Active && state_ != State::Off) {
    WaitingRegions::instance().add({t, region_, local_, p_, my_rank_, capacity_});
    region_.reset();
    local_ = nullptr;
    state_ = State::Off;
  }
  free_region(*t);
  WaitingRegions::instance().sweep();
}

void Mailbox::advance(transport::Transport& t, const std::vector<int>& members, int my_rank,
                      const std::vector<CallDescriptor>& all) {
  const int p = static_cast<int>(members.size());
  if (state_ == State::Unset) {
    // Everyone offers a region of the same layout (the capacity follows the eager limit,
    // which RDMACOLL_EAGER_LIMIT could set differently per rank), or nobody uses slots.
    bool offered = true;
    for (const auto& d : all)
      offered = offered && !d.slot_key.empty() && d.slot_capacity == capacity_;
    if (!offered) {
      unmap_peers(t);
      free_region(t);
      return;
    }
    my_rank_ = my_rank;
    peers_.assign(p, nullptr);
    mapped_all_ = true;
    for (int r = 0; r < p; ++r) {
      peers_[r] =
          r == my_rank
              ? local_
              : static_cast<uint8_t*>(t.map_remote(members[r], all[r].slot_addr,
                                                   region_bytes(p, capacity_), all[r].slot_key));
      mapped_all_ = mapped_all_ && peers_[r] != nullptr;
      // The owner may free its region once every peer's word is set, so set it only now.
      if (r != my_rank && peers_[r])
        mapped(peers_[r], my_rank, capacity_).store(1, std::memory_order_release);
    }
    // Whether the kernel lets us copy out of every peer's memory: a probe of its region, which
    // it mapped before offering it.
    readable_all_ = mapped_all_;
    for (int r = 0; r < p && readable_all_; ++r) {
      if (r != my_rank) readable_all_ = t.can_read_peer(members[r], all[r].slot_addr);
    }
    state_ = State::Mapping;
  } else if (state_ == State::Mapping) {
    bool everyone = true;
    bool reads = true;
    for (const auto& d : all) {
      everyone = everyone && d.slots_mapped;
      reads = reads && d.peers_readable;
    }
    state_ = everyone ? State::Active : State::Off;
    peer_reads_ = everyone && reads;
    if (!everyone) {
      unmap_peers(t);
      free_region(t);
    }
    log::info("mailbox for a group of " + std::to_string(p) +
              " ranks: " + (everyone ? "on (shared memory, no messages for small calls)" : "off") +
              (peer_reads_ ? "; peers read each other's chunks" : ""));
  }
}

// The record's layout in the header line (mailbox.hpp): the flag at 0, the length word at 8,
// the `mapped` word at 16, then these.
namespace {
struct Record {
#define RDMACOLL_RECORD(member) decltype(DescriptorHeader::member) member;
  RDMACOLL_DESCRIPTOR_RECORD(RDMACOLL_RECORD)
#undef RDMACOLL_RECORD
};
static_assert(Mailbox::kRecordAt + sizeof(Record) + Mailbox::kRecordInline == Mailbox::kLine);

// Where a record's inline chunk of n bytes lies: the end of the header line, or the lines after.
size_t chunk_at(size_t n) {
  return n <= Mailbox::kRecordInline ? Mailbox::kLine - Mailbox::kRecordInline : Mailbox::kLine;
}

// Which header fields the record carries.
struct InRecord {
#define RDMACOLL_FIELD(member, wire, kind) bool member = false;
#define RDMACOLL_LENGTH(member)
  RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH)
#undef RDMACOLL_FIELD
#undef RDMACOLL_LENGTH
};
constexpr InRecord kInRecord = [] {
  InRecord in;
#define RDMACOLL_RECORD(member) in.member = true;
  RDMACOLL_DESCRIPTOR_RECORD(RDMACOLL_RECORD)
#undef RDMACOLL_RECORD
  return in;
}();

}  // namespace

// A descriptor travels as a record when everything the record leaves out is what the reader
// rebuilds (the call's identity) or holds its default: every other field and every variable
// part but the inline chunk.
bool Mailbox::fits_record(const CallDescriptor& d, size_t capacity) {
  static constexpr CallDescriptor defaults{};
  bool fits = d.inline_data.size() <= capacity;
#define RDMACOLL_FIELD(member, wire, kind)                                                    \
  if (FieldKind::kind == FieldKind::Data && !kInRecord.member && d.member != defaults.member) \
    fits = false;
#define RDMACOLL_LENGTH(member)
  RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH)
#undef RDMACOLL_FIELD
#undef RDMACOLL_LENGTH
#define RDMACOLL_PART(member) \
  if (std::string_view(#member) != "inline_data" && !d.member.empty()) fits = false;
  RDMACOLL_DESCRIPTOR_PARTS(RDMACOLL_PART)
#undef RDMACOLL_PART
  return fits;
}

void Mailbox::write_record(uint8_t* slot, const CallDescriptor& d) {
  Record r;
#define RDMACOLL_RECORD(member) r.member = static_cast<decltype(r.member)>(d.member);
  RDMACOLL_DESCRIPTOR_RECORD(RDMACOLL_RECORD)
#undef RDMACOLL_RECORD
  std::memcpy(slot + kRecordAt, &r, sizeof r);
  const size_t n = d.inline_data.size();
  if (n > 0) std::memcpy(slot + chunk_at(n), d.inline_data.data(), n);
  length(slot) = kRecordBit | n;
}

bool Mailbox::read_record(const uint8_t* slot, size_t capacity, CallDescriptor& d) {
  const uint64_t n = length(slot) & ~kRecordBit;
  if (n > capacity) return false;
  Record r;
  std::memcpy(&r, slot + kRecordAt, sizeof r);
#define RDMACOLL_RECORD(member) d.member = static_cast<decltype(d.member)>(r.member);
  RDMACOLL_DESCRIPTOR_RECORD(RDMACOLL_RECORD)
#undef RDMACOLL_RECORD
  d.inline_data = {slot + chunk_at(n), n};
  return true;
}

}  // namespace rdmacoll::engine
