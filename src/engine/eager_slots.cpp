#include "engine/eager_slots.hpp"

#include "common/log.hpp"

namespace rdmacoll::engine {

void EagerSlots::annotate(transport::Transport& t, int p, size_t capacity, CallDescriptor& mine) {
  if (state_ == State::Unset) {
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

void EagerSlots::release(transport::Transport& t) {
  for (uint8_t* peer : peers_) {
    if (peer && peer != local_) t.unmap_remote(peer);
  }
  peers_.clear();
  // Active or Off: every member is past mapping (Off from Unset: nobody maps).
  if (region_ && (state_ == State::Active || state_ == State::Off)) t.free_mappable(region_);
  region_.reset();
  local_ = nullptr;
  state_ = State::Off;
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
      state_ = State::Off;
      release(t);
      return;
    }
    peers_.assign(p, nullptr);
    mapped_all_ = true;
    for (int r = 0; r < p; ++r) {
      peers_[r] =
          r == my_rank
              ? local_
              : static_cast<uint8_t*>(t.map_remote(members[r], all[r].slot_addr,
                                                   region_bytes(p, capacity_), all[r].slot_key));
      mapped_all_ = mapped_all_ && peers_[r] != nullptr;
    }
    state_ = State::Mapping;
  } else if (state_ == State::Mapping) {
    bool everyone = true;
    for (const auto& d : all)
      everyone = everyone && d.slots_mapped;
    state_ = everyone ? State::Active : State::Off;
    if (!everyone) release(t);
    log::info("eager slots for a group of " + std::to_string(p) +
              " ranks: " + (everyone ? "on (shared memory, no messages for small calls)" : "off"));
  }
}

}  // namespace rdmacoll::engine
