#include "bootstrap/address_envelope.hpp"

#include <cstring>

namespace rdmacoll::bootstrap {

namespace {
constexpr uint32_t kAddressMagic = 0x52444144;  // "RDAD"
constexpr uint32_t kAddressVersion = 1;
constexpr uint32_t kMaxTransportName = 64;
constexpr size_t kMinAddressBytes = 8;  // no transport's address is shorter
}  // namespace

std::vector<uint8_t> wrap_address(int rank, const std::string& transport,
                                  const std::vector<uint8_t>& address) {
  const uint32_t header[4] = {kAddressMagic, kAddressVersion, static_cast<uint32_t>(rank),
                              static_cast<uint32_t>(transport.size())};
  // One allocation, filled by memcpy (GCC 12 warns falsely on vector::insert of a string).
  std::vector<uint8_t> out(sizeof header + transport.size() + address.size());
  std::memcpy(out.data(), header, sizeof header);
  std::memcpy(out.data() + sizeof header, transport.data(), transport.size());
  if (!address.empty()) {
    std::memcpy(out.data() + sizeof header + transport.size(), address.data(), address.size());
  }
  return out;
}

std::optional<std::vector<uint8_t>> unwrap_address(const std::vector<uint8_t>& in, int rank,
                                                   const std::string& transport, std::string& why) {
  uint32_t header[4] = {};
  if (in.size() >= sizeof header) std::memcpy(header, in.data(), sizeof header);
  if (in.size() < sizeof header || header[0] != kAddressMagic || header[1] != kAddressVersion ||
      header[3] > kMaxTransportName || in.size() < sizeof header + header[3] + kMinAddressBytes) {
    why = "the transport address published for rank " + std::to_string(rank) + " is malformed (" +
          std::to_string(in.size()) + " bytes); not an rdmacoll rank of this version";
    return std::nullopt;
  }
  if (header[2] != static_cast<uint32_t>(rank)) {
    why = "the transport address under rank " + std::to_string(rank) + "'s key names rank " +
          std::to_string(header[2]);
    return std::nullopt;
  }
  const std::string theirs(reinterpret_cast<const char*>(in.data()) + sizeof header, header[3]);
  if (theirs != transport) {
    why = "rank " + std::to_string(rank) + " uses the " + theirs + " transport, this rank " +
          transport + "; every rank must use the same RDMACOLL_TRANSPORT";
    return std::nullopt;
  }
  return std::vector<uint8_t>(in.begin() + static_cast<std::ptrdiff_t>(sizeof header + header[3]),
                              in.end());
}

}  // namespace rdmacoll::bootstrap
