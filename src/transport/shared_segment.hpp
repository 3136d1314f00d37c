#pragma once
// Memory that processes on one host map together (symmetric memory, rdmacoll::empty): a memfd
// this process creates, and the same memfd mapped by a peer through pidfd_getfd, which needs
// the permission cross-memory attach (CMA) already needs on one host. Owned and unmapped by
// RAII; nothing here talks to the network.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace rdmacoll::transport {

class SharedSegment {
 public:
  // A new zeroed segment of `bytes` (rounded up to pages), or nullptr with `why` set.
  static std::unique_ptr<SharedSegment> create(size_t bytes, std::string& why);
  // Process `pid`'s segment `fd` of `bytes`, mapped here, or nullptr with `why` set.
  static std::unique_ptr<SharedSegment> map_peer(pid_t pid, int fd, size_t bytes, std::string& why);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The memfd, for peers to take while they map it; -1 once closed (the mapping stays).
  int fd() const { return fd_; }
  void close_fd();

 private:
  SharedSegment(uint8_t* data, size_t size, int fd) : data_(data), size_(size), fd_(fd) {}
  uint8_t* data_;
  size_t size_;
  int fd_;
};

}  // namespace rdmacoll::transport
