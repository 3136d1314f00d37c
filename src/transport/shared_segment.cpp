#include "transport/shared_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace rdmacoll::transport {

namespace {

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

size_t page_rounded(size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

constexpr const char* kName = "rdmacoll-symmetric";

// A memfd (only memfds answer F_GET_SEALS) that create() made (its name).
bool is_our_memfd(int fd) {
  if (::fcntl(fd, F_GET_SEALS) < 0) return false;
  char link[256];
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  if (n <= 0) return false;
  const std::string target(link, static_cast<size_t>(n));
  return target.rfind(std::string("/memfd:") + kName, 0) == 0;
}

uint8_t* map_shared(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

}  // namespace

std::unique_ptr<SharedSegment> SharedSegment::create(size_t bytes, std::string& why) {
  const size_t size = page_rounded(bytes);
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, kName, MFD_CLOEXEC));
  if (fd < 0) {
    why = errno_text("memfd_create");
    return nullptr;
  }
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    why = errno_text("ftruncate of the memfd");
    ::close(fd);
    return nullptr;
  }
  uint8_t* data = map_shared(fd, size);
  if (!data) {
    why = errno_text("mmap of the memfd");
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<SharedSegment>(new SharedSegment(data, size, fd));
}

std::unique_ptr<SharedSegment> SharedSegment::map_peer(pid_t pid, int fd, size_t bytes,
                                                       std::string& why) {
  const size_t size = page_rounded(bytes);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    why = errno_text("pidfd_open");
    return nullptr;
  }
  const int local = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
  ::close(pidfd);
  if (local < 0) {
    why = errno_text("pidfd_getfd (needs ptrace permission, as cross-memory attach does)");
    return nullptr;
  }
  // Only a segment of ours: a peer could name any descriptor of any process this one may
  // trace, a file among them, which the stores of a collective would then write.
  if (!is_our_memfd(local)) {
    why = "the peer's descriptor is not an rdmacoll symmetric-memory segment";
    ::close(local);
    return nullptr;
  }
  // A segment shorter than claimed would fault (SIGBUS) past its end: refused.
  struct stat st {};
  if (::fstat(local, &st) != 0 || static_cast<size_t>(st.st_size) < size) {
    why = "the peer's segment holds " + std::to_string(st.st_size) + " bytes, not " +
          std::to_string(size);
    ::close(local);
    return nullptr;
  }
  uint8_t* data = map_shared(local, size);
  ::close(local);  // the mapping keeps the memory
  if (!data) {
    why = errno_text("mmap of the peer's memfd");
    return nullptr;
  }
  return std::unique_ptr<SharedSegment>(new SharedSegment(data, size, -1));
}

SharedSegment::~SharedSegment() {
  ::munmap(data_, size_);
  close_fd();
}

void SharedSegment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace rdmacoll::transport
