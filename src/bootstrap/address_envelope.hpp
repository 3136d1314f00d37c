#pragma once
// Transport addresses travel through the store wrapped: magic, version, the publishing rank and
// the transport's name, checked before any transport parses the rest (a stranger's bytes under
// a rank's key once made UCX abort).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rdmacoll::bootstrap {

std::vector<uint8_t> wrap_address(int rank, const std::string& transport,
                                  const std::vector<uint8_t>& address);

// The transport's address inside `in`, read under `rank`'s key by a rank using `transport`;
// nullopt, with `why` finishing "the transport address published for rank N ...", when it is
// not what such a rank publishes.
std::optional<std::vector<uint8_t>> unwrap_address(const std::vector<uint8_t>& in, int rank,
                                                   const std::string& transport, std::string& why);

}  // namespace rdmacoll::bootstrap
