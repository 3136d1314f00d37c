#pragma once
// Small POSIX socket helpers shared by the store and the launcher.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <netinet/in.h>

namespace rdmacoll::bootstrap {

// Resolves host (name or IPv4 literal) to a sockaddr_in; throws InvalidArgument on failure.
struct sockaddr_in resolve_ipv4(const std::string& host, uint16_t port);

// Writes all bytes or throws (PeerFailure on EPIPE/ECONNRESET).
void send_all(int fd, const void* data, size_t n, const std::string& what);

// Reads exactly n bytes before `deadline`; returns false on timeout, throws PeerFailure on EOF.
bool recv_all(int fd, void* data, size_t n, std::chrono::steady_clock::time_point deadline,
              const std::string& what);

std::string errno_string(int err);

// This host's IPv4 addresses on interfaces that are up, loopback excluded, in interface order.
std::vector<std::string> host_ipv4_addresses();

}  // namespace rdmacoll::bootstrap
