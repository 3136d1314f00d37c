#include "bootstrap/socket_util.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

std::string errno_string(int err) {
  char buf[128];
  // GNU strerror_r returns the message pointer.
  return std::string(strerror_r(err, buf, sizeof buf)) + " (errno " + std::to_string(err) + ")";
}

std::vector<std::string> host_ipv4_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) out.emplace_back(text);
  }
  ::freeifaddrs(list);
  return out;
}

struct sockaddr_in resolve_ipv4(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw InvalidArgument("cannot resolve MASTER_ADDR '" + host + "': " + gai_strerror(rc));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return addr;
}

void send_all(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd pfd{fd, POLLOUT, 0};
        ::poll(&pfd, 1, 100);
        continue;
      }
      throw PeerFailure(what + ": send failed: " + errno_string(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

bool recv_all(int fd, void* data, size_t n, std::chrono::steady_clock::time_point deadline,
              const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
    if (pr < 0 && errno != EINTR) throw PeerFailure(what + ": poll failed: " + errno_string(errno));
    if (pr <= 0) continue;
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r == 0) throw PeerFailure(what + ": connection closed by the other side");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw PeerFailure(what + ": recv failed: " + errno_string(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace rdmacoll::bootstrap
