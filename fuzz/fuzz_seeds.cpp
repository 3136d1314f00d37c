// Writes the fuzz targets' starting inputs, made by the library's own serializers (so they
// follow the formats as they change): fuzz_seeds <dir> fills <dir>/<target>/.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "bootstrap/address_envelope.hpp"
#include "bootstrap/store_protocol.hpp"
#include "engine/collectives/registry.hpp"
#include "engine/control/descriptor_round.hpp"
#include "engine/core/call_descriptor.hpp"
#include "topology/topology.hpp"
#include "transport/verbs/eager_ring.hpp"

using namespace rdmacoll;
using Bytes = std::vector<uint8_t>;

namespace {

void write(const std::filesystem::path& dir, const std::string& name, const Bytes& b) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void append(Bytes& out, const Bytes& b) {
  out.insert(out.end(), b.begin(), b.end());
}

Bytes frame(bootstrap::StoreOp op, const std::string& key, const Bytes& value) {
  return bootstrap::make_frame(static_cast<uint8_t>(op), 0, key, value);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds <dir>\n");
    return 2;
  }
  const std::filesystem::path root = argv[1];
  using bootstrap::StoreOp;

  // The store: a seed byte, then a client's hello and one of each request.
  for (uint8_t seed : {0, 1, 7}) {
    Bytes s{seed};
    append(s, frame(StoreOp::Hello, "", {}));
    append(s, frame(StoreOp::Set, "rdmacoll/addr/0", Bytes(24, 0xab)));
    append(s, frame(StoreOp::Get, "rdmacoll/addr/0", bootstrap::int_bytes(1000)));
    append(s, frame(StoreOp::Get, "rdmacoll/missing", bootstrap::int_bytes(0)));
    append(s, frame(StoreOp::Add, "rdmacoll/claim/1", bootstrap::int_bytes(1)));
    append(s, frame(StoreOp::Check, "rdmacoll/abort", {}));
    append(s, frame(StoreOp::Delete, "rdmacoll/addr/0", {}));
    append(s, frame(StoreOp::Ping, "", {1, 2, 3}));
    write(root / "store_protocol", "requests_" + std::to_string(seed), s);
  }

  // Call descriptors: an eager all-gather, a rejection, the eager slots' setup.
  const uint8_t key[] = {1, 2, 3, 4, 5, 6, 7, 8};
  const uint8_t chunk[] = {10, 20, 30, 40};
  engine::CallDescriptor d;
  d.seq = 42;
  d.group = 3;
  d.rank = 1;
  d.collective = engine::collectives::kAllGather.code;
  d.in_dtype = d.out_dtype = 7;
  d.in_numel = 1;
  d.out_numel = 4;
  d.out_addr = 0x7f0000001000;
  d.out_bytes = 16;
  d.key = key;
  d.inline_data = chunk;
  write(root / "call_descriptor", "eager_all_gather", d.serialize());
  engine::CallDescriptor e = d;
  e.ok = false;
  e.error = "output has 3 elements, expected 4";
  e.inline_data = {};
  e.collective = engine::collectives::kAllReduce.code;
  e.reduce_op = 2;
  e.total_numel = 1 << 20;
  write(root / "call_descriptor", "rejected_all_reduce", e.serialize());
  engine::CallDescriptor s = d;
  s.collective = engine::collectives::kBroadcast.code;
  s.root = 2;
  s.slot_addr = 0x7f0000100000;
  s.slot_key = key;
  s.slot_capacity = 4096;
  s.slots_mapped = true;
  write(root / "call_descriptor", "broadcast_with_slots", s.serialize());

  // Addresses: a rank byte, then an envelope; and a published placement.
  for (const char* transport : {"ucx", "verbs"}) {
    Bytes a{1};
    append(a, bootstrap::wrap_address(1, transport, Bytes(40, 0x5a)));
    write(root / "address", std::string("envelope_") + transport, a);
  }
  topology::LocalPlacement p;
  p.host = "node7";
  p.machine = "0f3c9a";
  p.numa_node = 1;
  p.package = 0;
  p.nic = "rxe0";
  p.netdev = "eth0";
  const std::string text = p.serialize();
  Bytes placement{0};
  placement.insert(placement.end(), text.begin(), text.end());
  write(root / "address", "placement", placement);

  // Descriptor rounds: a byte for how many descriptors the round carries, then one message as
  // pack_round cuts it (the first of several, and a round in one message).
  for (const auto& [name, bytes, limit] : {std::tuple{"first_of_two", size_t{2300}, size_t{4160}},
                                           std::tuple{"one_message", size_t{280}, size_t{4160}}}) {
    const Bytes descriptor = d.serialize();
    Bytes desc(bytes, 0x33);
    std::copy(descriptor.begin(),
              descriptor.begin() + static_cast<std::ptrdiff_t>(std::min(bytes, descriptor.size())),
              desc.begin());
    Bytes out;
    std::vector<size_t> starts;
    engine::pack_round(
        2, [&](int) { return std::span<const uint8_t>(desc); }, limit, out, starts);
    Bytes seed{2};
    seed.insert(
        seed.end(), out.begin(),
        out.begin() + static_cast<std::ptrdiff_t>(starts.size() > 1 ? starts[1] : out.size()));
    write(root / "descriptor_round", name, seed);
  }
  // Eager slots as a peer's NIC leaves them: whole messages of a few lengths.
  for (size_t n : {size_t{0}, size_t{13}, size_t{300}, size_t{4152}}) {
    Bytes slot(transport::eager_ring::framed_bytes(n));
    Bytes payload(n, 0x5a);
    transport::eager_ring::pack(slot.data(), 7 + n, 0x1234 + n, payload.data(), n);
    write(root / "eager_slot", "len" + std::to_string(n), slot);
  }
  return 0;
}
