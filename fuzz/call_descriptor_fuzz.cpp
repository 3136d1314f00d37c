// libFuzzer target: the call descriptor every member sends every other at each collective
// (engine/call_descriptor), parsed from arbitrary bytes. A malformed message must raise
// TransportError, never read past its buffer; one that parses must serialize back to a message
// that parses to the same fields.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "engine/core/call_descriptor.hpp"
#include "rdmacoll/errors.hpp"

using rdmacoll::engine::CallDescriptor;

namespace {

bool same(const CallDescriptor& a, const CallDescriptor& b) {
  auto eq = [](auto x, auto y) { return std::equal(x.begin(), x.end(), y.begin(), y.end()); };
  return a.seq == b.seq && a.group == b.group && a.rank == b.rank && a.collective == b.collective &&
         a.ok == b.ok && a.in_dtype == b.in_dtype && a.out_dtype == b.out_dtype &&
         a.in_numel == b.in_numel && a.out_numel == b.out_numel && a.out_addr == b.out_addr &&
         a.out_bytes == b.out_bytes && a.total_numel == b.total_numel &&
         a.reduce_op == b.reduce_op && a.root == b.root && eq(a.key, b.key) && a.error == b.error &&
         eq(a.inline_data, b.inline_data) && a.slot_addr == b.slot_addr &&
         eq(a.slot_key, b.slot_key) && a.slot_capacity == b.slot_capacity &&
         a.slots_mapped == b.slots_mapped && a.global_rank == b.global_rank &&
         a.group_size == b.group_size && a.group_creation == b.group_creation &&
         a.group_digest == b.group_digest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so ASan sees any read past the message.
  const std::vector<uint8_t> message(data, data + size);
  CallDescriptor d;
  try {
    d = CallDescriptor::parse(message.data(), message.size());
  } catch (const rdmacoll::Error&) {
    return 0;
  }
  const std::vector<uint8_t> again = d.serialize();
  const CallDescriptor back = CallDescriptor::parse(again.data(), again.size());
  if (!same(d, back)) std::abort();
  return 0;
}
