#include "bootstrap/address_envelope.hpp"

#include <cstring>

#include "bootstrap/auth.hpp"

namespace rdmacoll::bootstrap {

namespace {
constexpr uint32_t kAddressMagic = 0x52444144;  // "RDAD"
constexpr uint32_t kAddressVersion = 1;
constexpr uint32_t kSignedVersion = 2;  // followed by the signature
constexpr size_t kSignatureBytes = 32;  // HMAC-SHA256

std::vector<uint8_t> signature(const std::string& token, const uint8_t* data, size_t size) {
  return store_proof(token, std::vector<uint8_t>(data, data + size), "rdmacoll address");
}
constexpr uint32_t kMaxTransportName = 64;
constexpr size_t kMinAddressBytes = 8;  // no transport's address is shorter
}  // namespace

std::vector<uint8_t> wrap_address(int rank, const std::string& transport,
                                  const std::vector<uint8_t>& address, const std::string& token) {
  const uint32_t header[4] = {kAddressMagic, token.empty() ? kAddressVersion : kSignedVersion,
                              static_cast<uint32_t>(rank), static_cast<uint32_t>(transport.size())};
  // One allocation, filled by memcpy (GCC 12 warns falsely on vector::insert of a string).
  std::vector<uint8_t> out(sizeof header + transport.size() + address.size());
  std::memcpy(out.data(), header, sizeof header);
  std::memcpy(out.data() + sizeof header, transport.data(), transport.size());
  if (!address.empty()) {
    std::memcpy(out.data() + sizeof header + transport.size(), address.data(), address.size());
  }
  if (!token.empty()) {
    const auto mac = signature(token, out.data(), out.size());
    out.insert(out.end(), mac.begin(), mac.end());
  }
  return out;
}

std::optional<std::vector<uint8_t>> unwrap_address(const std::vector<uint8_t>& in, int rank,
                                                   const std::string& transport, std::string& why,
                                                   const std::string& token) {
  uint32_t header[4] = {};
  if (in.size() >= sizeof header) std::memcpy(header, in.data(), sizeof header);
  const uint32_t version = token.empty() ? kAddressVersion : kSignedVersion;
  const size_t trailer = token.empty() ? 0 : kSignatureBytes;
  if (in.size() >= sizeof header && header[0] == kAddressMagic &&
      header[1] == (token.empty() ? kSignedVersion : kAddressVersion)) {
    why = "the transport address published for rank " + std::to_string(rank) +
          (token.empty() ? " is signed, and this rank has no RDMACOLL_AUTH_TOKEN"
                         : " is not signed with this job's RDMACOLL_AUTH_TOKEN") +
          "; every rank needs the same token";
    return std::nullopt;
  }
  if (in.size() < sizeof header || header[0] != kAddressMagic || header[1] != version ||
      header[3] > kMaxTransportName ||
      in.size() < sizeof header + header[3] + kMinAddressBytes + trailer) {
    why = "the transport address published for rank " + std::to_string(rank) + " is malformed (" +
          std::to_string(in.size()) + " bytes); not an rdmacoll rank of this version";
    return std::nullopt;
  }
  if (header[2] != static_cast<uint32_t>(rank)) {
    why = "the transport address under rank " + std::to_string(rank) + "'s key names rank " +
          std::to_string(header[2]);
    return std::nullopt;
  }
  if (!token.empty() && !same_proof(signature(token, in.data(), in.size() - trailer),
                                    std::vector<uint8_t>(in.end() - trailer, in.end()))) {
    why = "the transport address published for rank " + std::to_string(rank) +
          " does not carry this job's signature: it was not written by a rank that knows "
          "RDMACOLL_AUTH_TOKEN";
    return std::nullopt;
  }
  const std::string theirs(reinterpret_cast<const char*>(in.data()) + sizeof header, header[3]);
  if (theirs != transport) {
    why = "rank " + std::to_string(rank) + " uses the " + theirs + " transport, this rank " +
          transport + "; every rank must use the same RDMACOLL_TRANSPORT";
    return std::nullopt;
  }
  return std::vector<uint8_t>(in.begin() + static_cast<std::ptrdiff_t>(sizeof header + header[3]),
                              in.end() - static_cast<std::ptrdiff_t>(trailer));
}

}  // namespace rdmacoll::bootstrap
