#pragma once
// Transport addresses travel through the store wrapped: magic, version, the publishing rank and
// the transport's name, checked before any transport parses the rest (a stranger's bytes under
// a rank's key once made UCX abort). With the job's token (RDMACOLL_AUTH_TOKEN) the envelope is
// signed: an HMAC-SHA256 under the token of everything before it, so only a rank that knows the
// token can publish an address another rank will hand its transport. Without a token the
// structure and sizes are what is checked (docs/security.md).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rdmacoll::bootstrap {

std::vector<uint8_t> wrap_address(int rank, const std::string& transport,
                                  const std::vector<uint8_t>& address,
                                  const std::string& token = "");

// The transport's address inside `in`, read under `rank`'s key by a rank using `transport`;
// nullopt, with `why` finishing "the transport address published for rank N ...", when it is
// not what such a rank publishes.
std::optional<std::vector<uint8_t>> unwrap_address(const std::vector<uint8_t>& in, int rank,
                                                   const std::string& transport, std::string& why,
                                                   const std::string& token = "");

}  // namespace rdmacoll::bootstrap
