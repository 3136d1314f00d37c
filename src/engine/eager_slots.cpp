#include "engine/eager_slots.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/log.hpp"

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
            EagerSlots::mapped(e.local, r, e.capacity).load(std::memory_order_acquire) == 0)
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

void EagerSlots::annotate(transport::Transport& t, int p, size_t capacity, CallDescriptor& mine) {
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
  }
}

void EagerSlots::unmap_peers(transport::Transport& t) {
  for (uint8_t* peer : peers_) {
    if (peer && peer != local_) t.unmap_remote(peer);
  }
  peers_.clear();
}

void EagerSlots::free_region(transport::Transport& t) {
  if (region_) t.free_mappable(region_);
  region_.reset();
  local_ = nullptr;
  state_ = State::Off;
}

void EagerSlots::release(const std::shared_ptr<transport::Transport>& t) {
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

void EagerSlots::advance(transport::Transport& t, const std::vector<int>& members, int my_rank,
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
    state_ = State::Mapping;
  } else if (state_ == State::Mapping) {
    bool everyone = true;
    for (const auto& d : all)
      everyone = everyone && d.slots_mapped;
    state_ = everyone ? State::Active : State::Off;
    if (!everyone) {
      unmap_peers(t);
      free_region(t);
    }
    log::info("eager slots for a group of " + std::to_string(p) +
              " ranks: " + (everyone ? "on (shared memory, no messages for small calls)" : "off"));
  }
}

// The record's layout in the header line (eager_slots.hpp): the flag at 0, the length word at 8,
// the `mapped` word at 16, then these.
namespace {
struct Record {
  uint8_t op;
  uint8_t in_dtype;
  uint8_t out_dtype;
  uint8_t reduce_op;
  int32_t root;
  uint64_t in_numel;
  uint64_t out_numel;
  uint64_t total_numel;
};
static_assert(EagerSlots::kRecordAt + sizeof(Record) + EagerSlots::kRecordInline ==
              EagerSlots::kLine);

// Where a record's inline chunk of n bytes lies: the end of the header line, or the lines after.
size_t chunk_at(size_t n) {
  return n <= EagerSlots::kRecordInline ? EagerSlots::kLine - EagerSlots::kRecordInline
                                        : EagerSlots::kLine;
}
}  // namespace

bool EagerSlots::fits_record(const CallDescriptor& d, size_t capacity) {
  return d.ok && d.refused == CallDescriptor::Refusal::None && !d.group_broken && d.key.empty() &&
         d.error.empty() && d.splits.empty() && d.out_addr == 0 && d.out_bytes == 0 &&
         d.window == 0 && d.window_offset == 0 && d.slot_addr == 0 && d.slot_key.empty() &&
         d.slot_capacity == 0 && !d.slots_mapped && d.inline_data.size() <= capacity;
}

void EagerSlots::write_record(uint8_t* slot, const CallDescriptor& d) {
  const Record r{static_cast<uint8_t>(d.op),
                 d.in_dtype,
                 d.out_dtype,
                 d.reduce_op,
                 d.root,
                 d.in_numel,
                 d.out_numel,
                 d.total_numel};
  std::memcpy(slot + kRecordAt, &r, sizeof r);
  const size_t n = d.inline_data.size();
  if (n > 0) std::memcpy(slot + chunk_at(n), d.inline_data.data(), n);
  length(slot) = kRecordBit | n;
}

bool EagerSlots::read_record(const uint8_t* slot, size_t capacity, CallDescriptor& d) {
  const uint64_t n = length(slot) & ~kRecordBit;
  if (n > capacity) return false;
  Record r;
  std::memcpy(&r, slot + kRecordAt, sizeof r);
  d.op = static_cast<CollectiveOp>(r.op);
  d.in_dtype = r.in_dtype;
  d.out_dtype = r.out_dtype;
  d.reduce_op = r.reduce_op;
  d.root = r.root;
  d.in_numel = r.in_numel;
  d.out_numel = r.out_numel;
  d.total_numel = r.total_numel;
  d.inline_data = {slot + chunk_at(n), n};
  return true;
}

}  // namespace rdmacoll::engine
