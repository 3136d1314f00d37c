// Registration and shared-memory mapping (the eager slots' regions) over UCX.

#include <sys/uio.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "transport/ucx/transport_impl.hpp"

namespace rdmacoll::transport::ucx_impl {

std::shared_ptr<MemoryRegion> UcxTransport::register_memory(void* base, size_t length) {
  auto region = std::make_shared<UcxMemoryRegion>(context_, base, length);
  if (length > 0 && (protocol_ == Protocol::Put || (protocol_ == Protocol::Auto && shm_))) {
    region->map();
  }
  return region;
}

std::unique_ptr<RemoteRegion> UcxTransport::unpack_remote(int peer, uint64_t base, size_t length,
                                                          std::span<const uint8_t> packed_key) {
  ucp_rkey_h rkey = nullptr;
  if (!packed_key.empty() && (protocol_ == Protocol::Put ||
                              (protocol_ == Protocol::Auto && shm_ && peers_[peer]->same_host))) {
    check(ucp_ep_rkey_unpack(ep(peer), packed_key.data(), &rkey),
          "ucp_ep_rkey_unpack for peer " + std::to_string(peer));
  }
  return std::make_unique<UcxRemoteRegion>(peer, base, length, rkey);
}

std::shared_ptr<MemoryRegion> UcxTransport::allocate_mappable(size_t length) {
  if (!shm_ || length == 0) return nullptr;
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                 UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  p.address = nullptr;
  p.length = length;
  p.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  if (ucp_mem_map(context_, &p, &memh) != UCS_OK) return nullptr;
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  void* packed = nullptr;
  size_t packed_size = 0;
  if (ucp_mem_query(memh, &attr) != UCS_OK || attr.length < length ||
      ucp_rkey_pack(context_, memh, &packed, &packed_size) != UCS_OK) {
    ucp_mem_unmap(context_, memh);
    return nullptr;
  }
  std::memset(attr.address, 0, length);
  auto region =
      std::make_shared<UcxMemoryRegion>(context_, attr.address, length, memh, packed, packed_size);
  allocated_.push_back(region);
  return region;
}

void* UcxTransport::map_remote(int peer, uint64_t base, size_t length,
                               std::span<const uint8_t> packed_key) {
  if (!shm_ || packed_key.empty() || length == 0 || !peers_.at(peer)->same_host) return nullptr;
  // A peer that is gone or exiting may have taken its segment with it, and UCX 1.13 crashes
  // on such a key (peer_liveness.hpp). Without a mapping the group's slots stay off.
  if (liveness_.gone_or_exiting(peer)) return nullptr;
  ucp_rkey_h rkey = nullptr;
  if (ucp_ep_rkey_unpack(ep(peer), packed_key.data(), &rkey) != UCS_OK) return nullptr;
  void* first = nullptr;
  void* last = nullptr;
  if (ucp_rkey_ptr(rkey, base, &first) != UCS_OK ||
      ucp_rkey_ptr(rkey, base + length - 1, &last) != UCS_OK ||
      static_cast<uint8_t*>(last) != static_cast<uint8_t*>(first) + length - 1) {
    ucp_rkey_destroy(rkey);
    return nullptr;
  }
  mapped_keys_[first] = rkey;  // the mapping lives as long as the rkey
  return first;
}

void UcxTransport::free_mappable(const std::shared_ptr<MemoryRegion>& region) {
  std::erase_if(allocated_, [&](const auto& r) { return r == region; });
}

// CMA: one kernel copy out of the peer's pages, which it needs no part in (UCX's rendezvous
// does the same copy after an RTS, and answers with an ATS; the engine's own descriptor round
// replaces both). The kernel allows it where ptrace would be allowed (Yama's ptrace_scope,
// containers): EPERM means never, and the engine asks once per group before relying on it.
// The process whose memory read_peer() copies from, or 0 where it reads nothing.
pid_t UcxTransport::readable_pid(int peer) const {
  return shm_ && peer_reads_ ? liveness_.pid_of(peer) : 0;
}

bool UcxTransport::read_peer(int peer, uint64_t address, void* dst, size_t length) {
  const pid_t pid = readable_pid(peer);
  if (pid <= 0) return false;
  auto* to = static_cast<uint8_t*>(dst);
  while (length > 0) {
    iovec local{to, length};
    iovec remote{reinterpret_cast<void*>(address), length};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n > 0) {
      count_read(static_cast<size_t>(n));
      to += n;
      address += static_cast<uint64_t>(n);
      length -= static_cast<size_t>(n);
      continue;
    }
    const int err = n == 0 ? EFAULT : errno;
    if (err == EINTR) continue;
    if (err == EPERM || err == ENOSYS) return false;
    char at[24];
    std::snprintf(at, sizeof at, "%#llx", static_cast<unsigned long long>(address));
    const std::string what = "reading " + std::to_string(length) + " bytes at " + at + " of rank " +
                             std::to_string(peer) + " (process " + std::to_string(pid) +
                             ", process_vm_readv): " + std::strerror(err);
    if (err == ESRCH) throw PeerFailure(what + "; the process is gone");
    throw TransportError(what + "; its memory there is not readable");
  }
  return true;
}

bool UcxTransport::can_read_peer(int peer, uint64_t address) {
  const pid_t pid = readable_pid(peer);
  if (pid <= 0) return false;
  uint8_t byte = 0;
  iovec local{&byte, 1};
  iovec remote{reinterpret_cast<void*>(address), 1};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == 1;
}

void UcxTransport::unmap_remote(void* mapped) {
  auto it = mapped_keys_.find(mapped);
  if (it == mapped_keys_.end()) return;
  ucp_rkey_destroy(it->second);
  mapped_keys_.erase(it);
}

}  // namespace rdmacoll::transport::ucx_impl
