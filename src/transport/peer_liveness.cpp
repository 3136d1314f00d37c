#include "transport/peer_liveness.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::transport {

std::string host_key() {
  if (const auto id = settings::read(settings::kHostId)) return "id:" + *id;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string boot;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) boot = buf;
    std::fclose(f);
  }
  // Same host for us means: pidfds reach the peer (pid namespace) and the peer's shared
  // memory segments can be attached (IPC namespace, for the eager slots).
  char pid_ns[128] = {};
  char ipc_ns[128] = {};
  [[maybe_unused]] ssize_t n = ::readlink("/proc/self/ns/pid", pid_ns, sizeof pid_ns - 1);
  n = ::readlink("/proc/self/ns/ipc", ipc_ns, sizeof ipc_ns - 1);
  return std::string(host) + "/" + boot + "/" + pid_ns + "/" + ipc_ns;
}

PeerLiveness::~PeerLiveness() {
  for (auto& p : peers_) {
    if (p.pidfd >= 0) ::close(p.pidfd);
  }
}

void PeerLiveness::reset(const std::vector<std::pair<std::string, pid_t>>& host_and_pid) {
  for (auto& p : peers_) {
    if (p.pidfd >= 0) ::close(p.pidfd);
  }
  peers_.clear();
  const std::string mine = host_key();
  for (const auto& [host, pid] : host_and_pid)
    peers_.push_back({host == mine, pid, -1, {}});
}

std::optional<std::string> PeerLiveness::watch(int rank) {
  Peer& p = peers_.at(rank);
  if (!p.same_host || p.pidfd >= 0 || p.failure) return p.failure;
  p.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, p.pid, 0));
  if (p.pidfd < 0 && errno == ESRCH) {
    p.failure = "process " + std::to_string(p.pid) + " of rank " + std::to_string(rank) +
                " on this host is gone";
  }
  return p.failure;
}

std::optional<std::string> PeerLiveness::failure(int rank) {
  Peer& p = peers_.at(rank);
  // Asked about a peer not yet watched (a receive from it, destroy's count of the living):
  // watched from now on.
  if (watch(rank)) return p.failure;
  if (!p.failure && p.pidfd >= 0) {
    pollfd pfd{p.pidfd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) > 0) {
      p.failure = "process " + std::to_string(p.pid) + " of rank " + std::to_string(rank) +
                  " on this host has exited";
    }
  }
  return p.failure;
}

bool PeerLiveness::gone_or_exiting(int rank) {
  const Peer& p = peers_.at(rank);
  if (!p.same_host) return false;
  if (watch(rank) || failure(rank)) return true;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(p.pid));
  std::FILE* f = std::fopen(path, "re");
  if (!f) return true;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* name_end = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
  char state = 0;
  unsigned long flags = 0;
  // After the name: state ppid pgrp session tty_nr tpgid flags.
  if (!name_end || std::sscanf(name_end + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2) {
    return true;
  }
  // PF_SIGNALED is set as a fatal signal is taken, before a core dump (which can last long,
  // and during which the segment could not be attached: chaos.smoke's exit:abort caught it)
  // and before PF_EXITING; PF_DUMPCORE while the dump is written.
  constexpr unsigned long kPfExiting = 0x4, kPfDumpcore = 0x200, kPfSignaled = 0x400;
  return state == 'Z' || state == 'X' || (flags & (kPfExiting | kPfDumpcore | kPfSignaled)) != 0;
}

std::vector<int> PeerLiveness::fds() const {
  std::vector<int> out;
  for (const auto& p : peers_) {
    if (p.pidfd >= 0 && !p.failure) out.push_back(p.pidfd);
  }
  return out;
}

}  // namespace rdmacoll::transport

namespace rdmacoll::transport {

std::vector<uint8_t> encode_peer_address(uint32_t pid, const std::string& host,
                                         const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out(8 + host.size());
  const uint32_t hl = static_cast<uint32_t>(host.size());
  std::memcpy(out.data(), &pid, 4);
  std::memcpy(out.data() + 4, &hl, 4);
  std::memcpy(out.data() + 8, host.data(), host.size());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

PeerAddress decode_peer_address(const std::vector<uint8_t>& in, int rank) {
  PeerAddress a;
  uint32_t hl = 0;
  if (in.size() >= 8) {
    std::memcpy(&a.pid, in.data(), 4);
    std::memcpy(&hl, in.data() + 4, 4);
  }
  if (in.size() < 8 || in.size() < 8 + static_cast<size_t>(hl)) {
    throw TransportError("malformed transport address published by rank " + std::to_string(rank));
  }
  a.host.assign(reinterpret_cast<const char*>(in.data()) + 8, hl);
  a.payload.assign(in.begin() + 8 + hl, in.end());
  return a;
}

}  // namespace rdmacoll::transport
