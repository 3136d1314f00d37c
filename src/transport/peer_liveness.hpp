#pragma once
// Watches peers that run on this host (same kernel and pid namespace) through pidfds, so a
// peer that dies is noticed within one wait instead of after a transport timeout. Transports
// put host_key() and their pid in the address they publish.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rdmacoll::transport {

// Same value on every process of one host and pid namespace; RDMACOLL_HOST_ID overrides.
std::string host_key();

// What a transport publishes: pid | host key | the transport's own address bytes.
struct PeerAddress {
  uint32_t pid = 0;
  std::string host;
  std::vector<uint8_t> payload;
};
std::vector<uint8_t> encode_peer_address(uint32_t pid, const std::string& host,
                                         const std::vector<uint8_t>& payload);
// Throws TransportError naming `rank` when malformed.
PeerAddress decode_peer_address(const std::vector<uint8_t>& bytes, int rank);

class PeerLiveness {
 public:
  PeerLiveness() = default;
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  // One entry per rank; peers on another host are not watched.
  void reset(const std::vector<std::pair<std::string, pid_t>>& host_and_pid);
  bool same_host(int rank) const { return peers_.at(rank).same_host; }
  // The process id same-host `rank` published at init (authenticated with the job's address
  // exchange), or 0 for a peer on another host.
  pid_t pid_of(int rank) const {
    const Peer& p = peers_.at(rank);
    return p.same_host ? p.pid : 0;
  }
  // Starts watching `rank` (opens its pidfd); returns the failure if it is already gone.
  std::optional<std::string> watch(int rank);
  // Why `rank` is known dead, if it is (non-blocking check of its pidfd).
  std::optional<std::string> failure(int rank);
  // Whether same-host `rank` is gone or has begun to die (PF_SIGNALED, PF_DUMPCORE or
  // PF_EXITING in /proc/PID/stat: set before the process's memory goes, and with it a SysV
  // segment marked for removal, while its pidfd only turns readable later). Before a transport maps
  // a peer's shared memory: UCX 1.13 crashes unpacking the key of a segment that no longer exists
  // (chaos.smoke caught a rank killed during a group's first call, as its peers mapped its eager
  // slots).
  bool gone_or_exiting(int rank);
  // pidfds of watched, live peers, to poll() alongside the transport's own fd.
  std::vector<int> fds() const;

 private:
  struct Peer {
    bool same_host = false;
    pid_t pid = 0;
    int pidfd = -1;
    std::optional<std::string> failure;
  };
  std::string host_;
  std::vector<Peer> peers_;
};

}  // namespace rdmacoll::transport
