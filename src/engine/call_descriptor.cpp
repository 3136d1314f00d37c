#include "engine/call_descriptor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

namespace {

constexpr uint32_t kMagic = 0x52444344;  // "RDCD"

struct Fixed {
  uint32_t magic;
  uint32_t group;
  uint64_t seq;
  int32_t rank;
  uint8_t op;
  uint8_t ok;
  uint8_t in_dtype;
  uint8_t out_dtype;
  uint64_t in_numel;
  uint64_t out_numel;
  uint64_t out_addr;
  uint64_t out_bytes;
  uint32_t key_len;
  uint32_t error_len;
  uint32_t inline_len;
  uint32_t slot_key_len;
  uint64_t slot_addr;
  uint8_t slots_mapped;
  uint8_t reduce_op;
  uint8_t refused;
  uint8_t group_broken;
  uint32_t slot_capacity;
  uint64_t total_numel;
  int32_t root;
  uint32_t group_size;
  uint64_t group_creation;
  uint64_t group_digest;
  int32_t global_rank;
  uint32_t splits_len;
  uint64_t signal_token;
  uint64_t window;
  uint64_t window_offset;
};

static_assert(sizeof(Fixed) + kMaxSlotKeyBytes <= kInlineOverhead,
              "descriptor_capacity() leaves room for the header and a slot key");

}  // namespace

const char* collective_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::AllGather:
      return "all_gather_into_tensor";
    case CollectiveOp::Barrier:
      return "barrier";
    case CollectiveOp::AllReduce:
      return "all_reduce";
    case CollectiveOp::ReduceScatter:
      return "reduce_scatter_tensor";
    case CollectiveOp::Broadcast:
      return "broadcast";
    case CollectiveOp::Gather:
      return "gather";
    case CollectiveOp::Scatter:
      return "scatter";
    case CollectiveOp::Reduce:
      return "reduce";
    case CollectiveOp::AllToAll:
      return "all_to_all";
  }
  return "a collective";
}

size_t eager_limit(int p, int hosts, size_t max_message) {
  // Bytes, at most 4 MiB (init_process_group reads it first, so a bad value raises there).
  static const size_t forced = settings::count("RDMACOLL_EAGER_LIMIT", SIZE_MAX);
  if (forced != SIZE_MAX) return std::min(forced, max_message / 2);
  const size_t per_peer = (size_t{1} << 20) / static_cast<size_t>(std::max(p, 1));
  const size_t limit = hosts > 1 ? 2048 : std::clamp<size_t>(per_peer, 2048, 64 << 10);
  return std::min(limit, max_message / 2);
}

size_t CallDescriptor::serialized_size() const {
  return sizeof(Fixed) + key.size() + std::min(error.size(), kMaxErrorBytes) + slot_key.size() +
         splits.size() + inline_data.size();
}

size_t CallDescriptor::serialize_to(uint8_t* dst, size_t capacity) const {
  const size_t err_len = std::min(error.size(), kMaxErrorBytes);
  const size_t total = serialized_size();
  if (total > capacity) {
    throw TransportError("call descriptor of " + std::to_string(total) +
                         " bytes exceeds the limit of " + std::to_string(capacity));
  }
  const Fixed f{kMagic,
                group,
                seq,
                rank,
                static_cast<uint8_t>(op),
                static_cast<uint8_t>(ok ? 1 : 0),
                in_dtype,
                out_dtype,
                in_numel,
                out_numel,
                out_addr,
                out_bytes,
                static_cast<uint32_t>(key.size()),
                static_cast<uint32_t>(err_len),
                static_cast<uint32_t>(inline_data.size()),
                static_cast<uint32_t>(slot_key.size()),
                slot_addr,
                static_cast<uint8_t>(slots_mapped ? 1 : 0),
                reduce_op,
                static_cast<uint8_t>(refused),
                static_cast<uint8_t>(group_broken ? 1 : 0),
                slot_capacity,
                total_numel,
                root,
                group_size,
                group_creation,
                group_digest,
                global_rank,
                static_cast<uint32_t>(splits.size()),
                signal_token,
                window,
                window_offset};
  uint8_t* p = dst;
  std::memcpy(p, &f, sizeof f);
  p += sizeof f;
  for (std::span<const uint8_t> part :
       {key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(error.data()), err_len),
        slot_key, splits, inline_data}) {
    if (!part.empty()) std::memcpy(p, part.data(), part.size());
    p += part.size();
  }
  return total;
}

void CallDescriptor::serialize_into(std::vector<uint8_t>& out, size_t limit) const {
  const size_t total = serialized_size();
  if (total > limit) {
    throw TransportError("call descriptor of " + std::to_string(total) +
                         " bytes exceeds the limit of " + std::to_string(limit));
  }
  out.resize(total);
  serialize_to(out.data(), total);
}

std::vector<uint8_t> CallDescriptor::serialize() const {
  std::vector<uint8_t> out;
  serialize_into(out, SIZE_MAX);
  return out;
}

bool CallDescriptor::peek_seq(const uint8_t* data, size_t length, uint64_t& seq) {
  Fixed f;
  if (length < sizeof f) return false;
  std::memcpy(&f, data, sizeof f);
  if (f.magic != kMagic) return false;
  seq = f.seq;
  return true;
}

CallDescriptor CallDescriptor::parse(const uint8_t* data, size_t length) {
  Fixed f;
  if (length < sizeof f) {
    throw TransportError("malformed call descriptor: " + std::to_string(length) + " bytes");
  }
  std::memcpy(&f, data, sizeof f);
  if (f.refused > static_cast<uint8_t>(Refusal::TransportError) || f.group_broken > 1) {
    throw TransportError("malformed call descriptor (refusal " + std::to_string(f.refused) + ")");
  }
  if (f.magic != kMagic || sizeof f + static_cast<size_t>(f.key_len) + f.error_len +
                                   f.slot_key_len + f.splits_len + f.inline_len !=
                               length) {
    throw TransportError("malformed call descriptor (bad magic or lengths)");
  }
  CallDescriptor d;
  d.seq = f.seq;
  d.group = f.group;
  d.rank = f.rank;
  d.op = static_cast<CollectiveOp>(f.op);
  d.ok = f.ok != 0;
  d.in_dtype = f.in_dtype;
  d.out_dtype = f.out_dtype;
  d.in_numel = f.in_numel;
  d.out_numel = f.out_numel;
  d.out_addr = f.out_addr;
  d.out_bytes = f.out_bytes;
  const uint8_t* p = data + sizeof f;
  d.key = {p, f.key_len};
  p += f.key_len;
  d.error = {reinterpret_cast<const char*>(p), f.error_len};
  p += f.error_len;
  d.slot_key = {p, f.slot_key_len};
  p += f.slot_key_len;
  d.splits = {p, f.splits_len};
  p += f.splits_len;
  d.slot_addr = f.slot_addr;
  d.slots_mapped = f.slots_mapped != 0;
  d.slot_capacity = f.slot_capacity;
  d.reduce_op = f.reduce_op;
  d.refused = static_cast<Refusal>(f.refused);
  d.group_broken = f.group_broken != 0;
  d.total_numel = f.total_numel;
  d.root = f.root;
  d.global_rank = f.global_rank;
  d.group_size = f.group_size;
  d.group_creation = f.group_creation;
  d.group_digest = f.group_digest;
  d.signal_token = f.signal_token;
  d.window = f.window;
  d.window_offset = f.window_offset;
  d.inline_data = {p, f.inline_len};
  return d;
}

}  // namespace rdmacoll::engine
