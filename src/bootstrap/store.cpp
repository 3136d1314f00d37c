#include "bootstrap/store.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "bootstrap/socket_util.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

namespace {

struct FrameHeader {
  uint32_t magic;
  uint8_t op;
  uint8_t status;
  uint16_t reserved;
  uint32_t key_len;
  uint32_t value_len;
};
static_assert(sizeof(FrameHeader) == 16);

enum Status : uint8_t { kOk = 0, kMissing = 1 };

Bytes make_frame(uint8_t op, uint8_t status, const std::string& key, const Bytes& value) {
  FrameHeader h{kStoreMagic,
                op,
                status,
                0,
                static_cast<uint32_t>(key.size()),
                static_cast<uint32_t>(value.size())};
  Bytes out(sizeof h + key.size() + value.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!key.empty()) std::memcpy(out.data() + sizeof h, key.data(), key.size());
  if (!value.empty()) std::memcpy(out.data() + sizeof h + key.size(), value.data(), value.size());
  return out;
}

Bytes int_bytes(int64_t v) {
  Bytes b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

struct Connection {
  int fd;
  Bytes inbuf;
};

struct PendingGet {
  int fd;
  std::string key;
  Clock::time_point deadline;  // the server answers "missing" then, keeping the stream in step
};

// Server-side state, touched only by the server thread.
class StoreState {
 public:
  // Handles complete frames in c.inbuf; returns false when the connection must be dropped.
  bool consume(Connection& c, std::string& why) {
    while (c.inbuf.size() >= sizeof(FrameHeader)) {
      FrameHeader h;
      std::memcpy(&h, c.inbuf.data(), sizeof h);
      if (h.magic != kStoreMagic) {
        why = "bad magic";
        return false;
      }
      if (h.op < static_cast<uint8_t>(StoreOp::Set) || h.op > static_cast<uint8_t>(StoreOp::Ping)) {
        why = "unknown op " + std::to_string(h.op);
        return false;
      }
      if (h.key_len > kMaxKeyBytes || h.value_len > kMaxValueBytes) {
        why = "oversized frame (key " + std::to_string(h.key_len) + " B, value " +
              std::to_string(h.value_len) + " B)";
        return false;
      }
      const size_t total = sizeof h + h.key_len + h.value_len;
      if (c.inbuf.size() < total) return true;
      std::string key(reinterpret_cast<const char*>(c.inbuf.data() + sizeof h), h.key_len);
      Bytes value(c.inbuf.begin() + static_cast<ptrdiff_t>(sizeof h + h.key_len),
                  c.inbuf.begin() + static_cast<ptrdiff_t>(total));
      c.inbuf.erase(c.inbuf.begin(), c.inbuf.begin() + static_cast<ptrdiff_t>(total));
      if (!handle(c.fd, static_cast<StoreOp>(h.op), key, std::move(value))) {
        why = "reply failed";
        return false;
      }
    }
    return true;
  }

  // Answers expired waits; returns the poll timeout (ms) until the next deadline, -1 if none.
  int expire() {
    const auto now = Clock::now();
    std::erase_if(pending_, [&](const PendingGet& p) {
      if (p.deadline > now) return false;
      reply(p.fd, StoreOp::Get, kMissing, {});
      return true;
    });
    int next = -1;
    for (const auto& p : pending_) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now).count() + 1;
      if (next < 0 || ms < next) next = static_cast<int>(std::min<int64_t>(ms, 1 << 30));
    }
    return next;
  }

  void drop(int fd) {
    std::erase_if(pending_, [fd](const PendingGet& p) { return p.fd == fd; });
  }

 private:
  static bool reply(int fd, StoreOp op, uint8_t status, const Bytes& value) {
    try {
      send_all(fd, make_frame(static_cast<uint8_t>(op), status, {}, value).data(),
               sizeof(FrameHeader) + value.size(), "store reply");
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  bool handle(int fd, StoreOp op, const std::string& key, Bytes value) {
    switch (op) {
      case StoreOp::Set: {
        data_[key] = std::move(value);
        bool ok = reply(fd, op, kOk, {});
        wake_waiters(key);
        return ok;
      }
      case StoreOp::Get: {
        auto it = data_.find(key);
        if (it != data_.end()) return reply(fd, op, kOk, it->second);
        int64_t timeout_ms = 0;
        if (value.size() == sizeof timeout_ms)
          std::memcpy(&timeout_ms, value.data(), sizeof timeout_ms);
        pending_.push_back({fd, key, Clock::now() + std::chrono::milliseconds(timeout_ms)});
        return true;
      }
      case StoreOp::Add: {
        int64_t delta = 0;
        if (value.size() == sizeof delta) std::memcpy(&delta, value.data(), sizeof delta);
        int64_t current = 0;
        auto it = data_.find(key);
        if (it != data_.end() && it->second.size() == sizeof current) {
          std::memcpy(&current, it->second.data(), sizeof current);
        }
        current += delta;
        data_[key] = int_bytes(current);
        bool ok = reply(fd, op, kOk, int_bytes(current));
        wake_waiters(key);
        return ok;
      }
      case StoreOp::Check:
        return reply(fd, op, data_.count(key) ? kOk : kMissing, {});
      case StoreOp::Delete:
        data_.erase(key);
        return reply(fd, op, kOk, {});
      case StoreOp::Ping:
        return reply(fd, op, kOk, value);
    }
    return false;
  }

  void wake_waiters(const std::string& key) {
    const Bytes& v = data_[key];
    std::erase_if(pending_, [&](const PendingGet& p) {
      if (p.key != key) return false;
      reply(p.fd, StoreOp::Get, kOk, v);  // a failed reply surfaces on that fd's next poll
      return true;
    });
  }

  std::map<std::string, Bytes> data_;
  std::vector<PendingGet> pending_;
};

}  // namespace

StoreServer::StoreServer(const std::string& host, uint16_t port) {
  sockaddr_in addr = resolve_ipv4(host, port);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw Error("store: socket() failed: " + errno_string(errno));
  int one = 1;
  // SO_REUSEADDR only lets us rebind past TIME_WAIT; a live listener still gives EADDRINUSE.
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    std::string hint = err == EADDRINUSE ? " - another process (or an earlier run) holds this "
                                           "port; pick a free MASTER_PORT"
                                         : "";
    throw InvalidArgument("rank 0 cannot host the rendezvous store on " + host + ":" +
                          std::to_string(port) + ": bind failed: " + errno_string(err) + hint);
  }
  if (::listen(listen_fd_, 1024) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    throw Error("store: listen failed: " + errno_string(err));
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw Error("store: pipe failed: " + errno_string(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  const char c = 'x';
  [[maybe_unused]] ssize_t w = ::write(wake_pipe_[1], &c, 1);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void StoreServer::stop_accepting() {
  if (!accepting_.exchange(false)) return;
  ::shutdown(listen_fd_, SHUT_RDWR);  // the listener closes now: new connections are refused
  const char c = 'w';                 // and serve() stops polling it
  [[maybe_unused]] ssize_t w = ::write(wake_pipe_[1], &c, 1);
}

void StoreServer::serve() {
  StoreState state;
  std::vector<Connection> conns;
  std::vector<pollfd> pfds;
  for (;;) {
    pfds.clear();
    pfds.push_back({wake_pipe_[0], POLLIN, 0});
    pfds.push_back({accepting_.load() ? listen_fd_ : -1, POLLIN, 0});  // -1: poll skips it
    for (auto& c : conns)
      pfds.push_back({c.fd, POLLIN, 0});
    if (::poll(pfds.data(), pfds.size(), state.expire()) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "rdmacoll store: poll failed: %s\n", errno_string(errno).c_str());
      break;
    }
    if (pfds[0].revents) {
      char c = 'x';
      if (::read(wake_pipe_[0], &c, 1) != 1 || c == 'x') break;
      continue;  // 'w': stop_accepting() changed what to poll
    }
    // Serve existing connections first: pfds[i + 2] belongs to conns[i].
    std::vector<int> dead;
    for (size_t i = 0; i < conns.size(); ++i) {
      if (!pfds[i + 2].revents) continue;
      Connection& c = conns[i];
      uint8_t buf[65536];
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r <= 0) {
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        dead.push_back(c.fd);
        continue;
      }
      c.inbuf.insert(c.inbuf.end(), buf, buf + r);
      std::string why;
      if (!state.consume(c, why)) {
        if (why != "reply failed") {
          rejected_.fetch_add(1);
          std::fprintf(stderr, "rdmacoll store: dropped a connection that sent %s\n", why.c_str());
        }
        dead.push_back(c.fd);
      }
    }
    for (int fd : dead) {
      state.drop(fd);
      ::close(fd);
      std::erase_if(conns, [fd](const Connection& c) { return c.fd == fd; });
    }
    if (accepting_.load() && (pfds[1].revents & POLLIN)) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        set_nodelay(fd);
        conns.push_back({fd, {}});
      }
    }
  }
  for (auto& c : conns)
    ::close(c.fd);
}

StoreClient::StoreClient(const std::string& host, uint16_t port, Clock::time_point deadline)
    : host_(host), port_(port) {
  const sockaddr_in addr = resolve_ipv4(host, port);
  std::chrono::milliseconds backoff(5);
  std::string last_error;
  for (;;) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw Error("store client: socket() failed: " + errno_string(errno));
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) break;
    last_error = errno_string(errno);
    ::close(fd_);
    fd_ = -1;
    if (Clock::now() + backoff >= deadline) {
      throw Timeout("could not reach the rendezvous store at " + address() +
                    " before the timeout (last error: " + last_error +
                    "); is rank 0 running with the same MASTER_ADDR/MASTER_PORT?");
    }
    // Retry pacing while rank 0 starts up, not a synchronisation wait.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  set_nodelay(fd_);
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

Bytes StoreClient::request(StoreOp op, const std::string& key, const Bytes& value,
                           std::chrono::milliseconds timeout) {
  if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes) {
    throw InvalidArgument("store: key or value too large (" + std::to_string(key.size()) + " / " +
                          std::to_string(value.size()) + " bytes)");
  }
  std::lock_guard lock(mutex_);
  const std::string what = "rendezvous store at " + address();
  Bytes frame = make_frame(static_cast<uint8_t>(op), 0, key, value);
  send_all(fd_, frame.data(), frame.size(), what);
  // The server answers a Get at its own deadline; the grace covers a server that died.
  const auto deadline = Clock::now() + timeout + std::chrono::seconds(10);
  FrameHeader h;
  if (!recv_all(fd_, &h, sizeof h, deadline, what)) {
    // The reply may still come; this connection can no longer be trusted to stay in step.
    ::shutdown(fd_, SHUT_RDWR);
    throw Timeout("timed out after " + std::to_string(timeout.count()) + " ms waiting for key '" +
                  key + "' in the " + what);
  }
  if (h.magic != kStoreMagic || h.value_len > kMaxValueBytes) {
    throw PeerFailure(what + ": malformed reply");
  }
  Bytes out(h.value_len);
  if (h.value_len && !recv_all(fd_, out.data(), out.size(), deadline, what)) {
    throw Timeout(what + ": reply truncated at timeout");
  }
  if (op == StoreOp::Check) out.assign(1, h.status == kOk ? 1 : 0);
  if (op == StoreOp::Get && h.status == kMissing) {
    throw Timeout("timed out after " + std::to_string(timeout.count()) + " ms waiting for key '" +
                  key + "' in the " + what);
  }
  return out;
}

namespace {
constexpr std::chrono::milliseconds kShortOp(60'000);
}

void StoreClient::set(const std::string& key, const Bytes& value) {
  request(StoreOp::Set, key, value, kShortOp);
}

Bytes StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  return request(StoreOp::Get, key, int_bytes(timeout.count()), timeout);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  Bytes r = request(StoreOp::Add, key, int_bytes(delta), kShortOp);
  int64_t v = 0;
  if (r.size() == sizeof v) std::memcpy(&v, r.data(), sizeof v);
  return v;
}

bool StoreClient::check(const std::string& key) {
  return request(StoreOp::Check, key, {}, kShortOp).at(0) != 0;
}

void StoreClient::erase(const std::string& key) {
  request(StoreOp::Delete, key, {}, kShortOp);
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const auto& k : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    get(k, std::max(left, std::chrono::milliseconds(1)));
  }
}

}  // namespace rdmacoll::bootstrap
