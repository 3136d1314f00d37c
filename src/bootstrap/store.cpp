#include "bootstrap/store.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "bootstrap/auth.hpp"
#include "bootstrap/socket_util.hpp"
#include "bootstrap/store_protocol.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

namespace {

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// RLIMIT_NOFILE, raised to its hard limit first (as MPI launchers do): rank 0 holds a connection
// per rank besides its transport's.
size_t descriptor_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    rlimit raised = r;
    raised.rlim_cur = r.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
  }
  return r.rlim_cur == RLIM_INFINITY ? size_t{1} << 20 : static_cast<size_t>(r.rlim_cur);
}

}  // namespace

StoreServer::StoreServer(const std::string& host, uint16_t port, StoreCredentials credentials,
                         StoreLimits limits)
    : credentials_(std::move(credentials)), limits_(limits) {
  sockaddr_in addr = resolve_ipv4(host, port);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw Error("store: socket() failed: " + errno_string(errno));
  int one = 1;
  // SO_REUSEADDR only lets us rebind past TIME_WAIT; a live listener still gives EADDRINUSE.
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    std::string hint = err == EADDRINUSE      ? " - another process (or an earlier run) holds this "
                                                "port; pick a free MASTER_PORT"
                       : err == EADDRNOTAVAIL ? " - it is not an address of this host; set "
                                                "RDMACOLL_STORE_BIND to one that is"
                                              : "";
    const std::string message = "rank 0 cannot host the rendezvous store on " + host + ":" +
                                std::to_string(port) + ": bind failed: " + errno_string(err) + hint;
    if (err == EADDRINUSE) throw PortInUse(message);
    throw InvalidArgument(message);
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

std::vector<std::string> StoreServer::refusals() const {
  std::lock_guard lock(refusals_mutex_);
  return refusals_;
}

void StoreServer::stop_accepting() {
  if (!accepting_.exchange(false)) return;
  ::shutdown(listen_fd_, SHUT_RDWR);  // the listener closes now: new connections are refused
  const char c = 'w';                 // and serve() stops polling it
  [[maybe_unused]] ssize_t w = ::write(wake_pipe_[1], &c, 1);
}

void StoreServer::serve() {
  StoreState state(credentials_, limits_);
  // Descriptors are shared with the rank's own transport (UCX, verbs) and sockets: the store
  // leaves them a reserve (256, or a quarter of a smaller limit), so a flood of connections
  // cannot starve them.
  const size_t nofile = descriptor_limit();
  const size_t max_connections =
      std::min(limits_.max_connections, nofile - std::min<size_t>(256, nofile / 4));
  std::vector<pollfd> pfds;
  std::vector<int> fds;  // fds[i] is pfds[i + 2]'s connection
  // When accept() fails for lack of descriptors, the listener stays readable: leave it out of
  // the poll set for a while instead of spinning on it.
  Clock::time_point accept_after{};
  // The first few drops are logged one by one; in a storm, one line every 10 s counts the rest.
  constexpr int kLoggedDrops = 10;
  uint64_t unlogged = 0;
  Clock::time_point next_summary{};
  auto drop = [&](int fd, const std::string& why) {
    if (!why.empty()) {
      const uint64_t n = rejected_.fetch_add(1) + 1;
      const auto now = Clock::now();
      if (n <= kLoggedDrops) {
        std::fprintf(stderr, "rdmacoll store: dropped a connection that sent %s%s\n", why.c_str(),
                     n == kLoggedDrops ? " (further drops are counted every 10 s)" : "");
        next_summary = now + std::chrono::seconds(10);
      } else if (++unlogged, now >= next_summary) {
        std::fprintf(stderr,
                     "rdmacoll store: dropped %llu more connections in the last 10 s (the "
                     "latest sent %s)\n",
                     static_cast<unsigned long long>(unlogged), why.c_str());
        unlogged = 0;
        next_summary = now + std::chrono::seconds(10);
      }
    }
    state.drop(fd);
    ::close(fd);
  };
  for (;;) {
    std::vector<std::pair<int, std::string>> expired;
    int timeout = state.expire(expired);
    for (const auto& [fd, why] : expired)
      drop(fd, why);
    const auto now = Clock::now();
    const bool listen =
        accepting_.load() && now >= accept_after && state.connections() < max_connections;
    if (accepting_.load() && !listen) {
      const int backoff = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(accept_after - now).count() + 1);
      timeout = timeout < 0 ? std::max(backoff, 1) : std::min(timeout, std::max(backoff, 1));
    }
    pfds.clear();
    fds.clear();
    pfds.push_back({wake_pipe_[0], POLLIN, 0});
    pfds.push_back({listen ? listen_fd_ : -1, POLLIN, 0});  // -1: poll skips it
    for (auto& [fd, c] : state.conns()) {
      const bool out = c.out_sent < c.outbuf.size();
      pfds.push_back({fd, static_cast<short>((c.closing ? 0 : POLLIN) | (out ? POLLOUT : 0)), 0});
      fds.push_back(fd);
    }
    if (::poll(pfds.data(), pfds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "rdmacoll store: poll failed: %s\n", errno_string(errno).c_str());
      break;
    }
    if (pfds[0].revents) {
      char c = 'x';
      if (::read(wake_pipe_[0], &c, 1) != 1 || c == 'x') break;
      continue;  // 'w': stop_accepting() changed what to poll
    }
    std::vector<std::pair<int, std::string>> dead;
    for (size_t i = 0; i < fds.size(); ++i) {
      const short ev = pfds[i + 2].revents;
      if (!ev) continue;
      Connection& c = state.conns().at(fds[i]);
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        uint8_t buf[65536];
        const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
          dead.push_back({c.fd, ""});
          continue;
        }
        std::string why;
        const bool kept = r <= 0 || state.receive(c, buf, static_cast<size_t>(r), why);
        // Noted before the refusal is sent, so that rank 0 knows of it once the client does.
        if (auto refused = state.take_refusals(); !refused.empty()) {
          std::lock_guard lock(refusals_mutex_);
          for (auto& line : refused)
            refusals_.push_back(std::move(line));
          if (refusals_.size() > 8) refusals_.erase(refusals_.begin(), refusals_.end() - 8);
        }
        if (!kept) {
          dead.push_back({c.fd, why});
          continue;
        }
      }
      // Write what is queued (also replies just produced); never wait for a slow reader.
      while (c.out_sent < c.outbuf.size()) {
        const ssize_t w =
            ::send(c.fd, c.outbuf.data() + c.out_sent, c.outbuf.size() - c.out_sent, MSG_NOSIGNAL);
        if (w > 0) {
          c.out_sent += static_cast<size_t>(w);
        } else {
          if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
          dead.push_back({c.fd, ""});
          break;
        }
      }
      if (c.closing && c.out_sent == c.outbuf.size()) dead.push_back({c.fd, "a failed hello"});
    }
    for (const auto& o : state.take_overflowed())
      dead.push_back(o);

    for (const auto& [fd, why] : dead) {
      if (state.conns().count(fd)) drop(fd, why);
    }
    if (listen && (pfds[1].revents & POLLIN)) {
      for (int i = 0; i < 64 && state.connections() < max_connections; ++i) {
        sockaddr_in peer{};
        socklen_t peer_len = sizeof peer;
        const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                                 SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_after = Clock::now() + std::chrono::milliseconds(100);
          }
          break;
        }
        set_nodelay(fd);
        for (int old : state.accept(fd, ntohl(peer.sin_addr.s_addr)))
          drop(old, "nothing before newer connections came (too many unproven at once)");
      }
    }
    // Replies queued to other connections (a Set waking a Get) go out on their next POLLOUT.
  }
  // Replies already queued (the last Set a client waits on) get one last chance to leave.
  for (auto& [fd, c] : state.conns()) {
    if (c.out_sent < c.outbuf.size()) {
      [[maybe_unused]] const ssize_t w =
          ::send(fd, c.outbuf.data() + c.out_sent, c.outbuf.size() - c.out_sent, MSG_NOSIGNAL);
    }
    ::close(fd);
  }
}

namespace {
// The server closed the connection before its verdict on our hello: it drops unproven
// connections when too many come at once (a flood, or hundreds of ranks starting together),
// so the client connects again.
struct DroppedBeforeVerdict : PeerFailure {
  using PeerFailure::PeerFailure;
};
}  // namespace

StoreClient::StoreClient(const std::string& host, uint16_t port, Clock::time_point deadline,
                         const StoreCredentials& credentials)
    : host_(host), port_(port) {
  const sockaddr_in addr = resolve_ipv4(host, port);
  std::chrono::milliseconds backoff(5);
  std::string last_error;
  auto pause_or_give_up = [&](const std::string& why) {
    if (Clock::now() + backoff >= deadline) {
      throw Timeout("could not reach the rendezvous store at " + address() +
                    " before the timeout (last error: " + why +
                    "); is rank 0 running with the same MASTER_ADDR/MASTER_PORT?");
    }
    // Retry pacing while rank 0 starts up (or sheds load), not a synchronisation wait.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  };
  for (;;) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw Error("store client: socket() failed: " + errno_string(errno));
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      last_error = errno_string(errno);
      ::close(fd_);
      fd_ = -1;
      pause_or_give_up(last_error);
      continue;
    }
    set_nodelay(fd_);
    try {
      prove(credentials, deadline);
      return;
    } catch (const DroppedBeforeVerdict& e) {
      ::close(fd_);
      fd_ = -1;
      pause_or_give_up(e.what());
    } catch (...) {
      ::close(fd_);
      fd_ = -1;
      throw;
    }
  }
}

// The challenge, our Hello, the verdict.
void StoreClient::prove(const StoreCredentials& credentials, Clock::time_point deadline) {
  const std::string what = "rendezvous store at " + address();
  const auto until = std::max(deadline, Clock::now() + std::chrono::seconds(10));
  try {
    prove_on(credentials, until, what);
  } catch (const DroppedBeforeVerdict&) {
    throw;
  } catch (const PeerFailure& e) {
    // Closed or reset before the verdict: the server shed us (see DroppedBeforeVerdict).
    throw DroppedBeforeVerdict(e.what());
  }
}

void StoreClient::prove_on(const StoreCredentials& credentials, Clock::time_point until,
                           const std::string& what) {
  FrameHeader h;
  if (!recv_all(fd_, &h, sizeof h, until, what)) {
    throw Timeout(what + ": no challenge from the server; is it an rdmacoll store?");
  }
  if (h.magic != kStoreMagic || h.op != static_cast<uint8_t>(StoreOp::Challenge) ||
      h.key_len != 0 || h.value_len != kNonceBytes) {
    throw InvalidArgument(what + ": not an rdmacoll store of this version (bad challenge)");
  }
  Bytes nonce(kNonceBytes);
  if (!recv_all(fd_, nonce.data(), nonce.size(), until, what)) {
    throw Timeout(what + ": challenge truncated");
  }
  // Our proof, and a nonce of ours on which the server proves it knows the token too.
  Bytes proof;
  Bytes our_nonce;
  if (!credentials.token.empty()) {
    proof = store_proof(credentials.token, nonce, credentials.job_id);
    our_nonce = random_bytes(kNonceBytes);
    proof.insert(proof.end(), our_nonce.begin(), our_nonce.end());
  }
  const Bytes hello =
      make_frame(static_cast<uint8_t>(StoreOp::Hello), 0, credentials.job_id, proof);
  send_all(fd_, hello.data(), hello.size(), what);
  if (!recv_all(fd_, &h, sizeof h, until, what)) throw Timeout(what + ": no answer to our hello");
  if (h.magic != kStoreMagic || h.value_len > 4096) {
    throw InvalidArgument(what + ": not an rdmacoll store of this version (malformed reply)");
  }
  Bytes message(h.value_len);
  if (h.value_len && !recv_all(fd_, message.data(), message.size(), until, what)) {
    throw Timeout(what + ": reply truncated");
  }
  if (h.status == kRejected) {
    throw InvalidArgument(what +
                          " refused this process: " + std::string(message.begin(), message.end()));
  }
  if (!credentials.token.empty() &&
      !same_proof(message, server_proof(credentials.token, our_nonce, credentials.job_id))) {
    throw InvalidArgument(what +
                          " does not know this job's RDMACOLL_AUTH_TOKEN: another process holds "
                          "MASTER_ADDR:MASTER_PORT and is not this job's rank 0");
  }
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
  // The server answers a Get at its own deadline; the grace covers a server that died or
  // stopped, and stays within a tenth of the timeout (at most 10 s). A get's grace is at least
  // a second: the rendezvous polls with quarter-second gets, and a loaded rank 0 answers one
  // late (a 100 ms grace once ended a job's init there).
  const auto floor =
      op == StoreOp::Get ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(100);
  const auto grace =
      std::clamp<std::chrono::milliseconds>(timeout / 10, floor, std::chrono::seconds(10));
  const auto deadline = Clock::now() + timeout + grace;
  FrameHeader h;
  if (!recv_all(fd_, &h, sizeof h, deadline, what)) {
    // The reply may still come; this connection can no longer be trusted to stay in step.
    ::shutdown(fd_, SHUT_RDWR);
    throw Timeout("timed out after " + std::to_string(timeout.count()) + " ms waiting for key '" +
                  key + "' in the " + what);
  }
  if (h.magic != kStoreMagic || h.value_len > kMaxValueBytes) {
    ::shutdown(fd_, SHUT_RDWR);
    throw PeerFailure(what + ": malformed reply");
  }
  // Once the header is in, the value is on its way: read it whole, whatever the request's own
  // timeout. A short get's deadline could end between the two on a loaded machine, and the
  // rest of the frame was then read as the next reply ("malformed reply"). Only a server that
  // stops mid-frame for the operation timeout ends the connection.
  Bytes out(h.value_len);
  const auto frame_deadline = std::max(deadline, Clock::now() + op_timeout());
  if (h.value_len && !recv_all(fd_, out.data(), out.size(), frame_deadline, what)) {
    ::shutdown(fd_, SHUT_RDWR);
    throw PeerFailure(what + ": the store stopped in the middle of a reply");
  }
  return finish_reply(op, key, timeout, h.status, std::move(out));
}

Bytes StoreClient::finish_reply(StoreOp op, const std::string& key,
                                std::chrono::milliseconds timeout, int status, Bytes out) {
  const std::string what = "rendezvous store at " + address();
  if (op == StoreOp::Check) out.assign(1, status == kOk ? 1 : 0);
  if (op == StoreOp::Get && status == kMissing) {
    throw Timeout("timed out after " + std::to_string(timeout.count()) + " ms waiting for key '" +
                  key + "' in the " + what);
  }
  return out;
}

void StoreClient::set(const std::string& key, const Bytes& value) {
  request(StoreOp::Set, key, value, op_timeout());
}

Bytes StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  return request(StoreOp::Get, key, int_bytes(timeout.count()), timeout);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  Bytes r = request(StoreOp::Add, key, int_bytes(delta), op_timeout());
  int64_t v = 0;
  if (r.size() == sizeof v) std::memcpy(&v, r.data(), sizeof v);
  return v;
}

bool StoreClient::check(const std::string& key) {
  return request(StoreOp::Check, key, {}, op_timeout()).at(0) != 0;
}

Bytes encode_keys(const std::vector<std::string>& keys) {
  Bytes out(4);
  const auto n = static_cast<uint32_t>(keys.size());
  std::memcpy(out.data(), &n, 4);
  for (const std::string& k : keys) {
    const auto len = static_cast<uint32_t>(k.size());
    const size_t at = out.size();
    out.resize(at + 4 + k.size());
    std::memcpy(out.data() + at, &len, 4);
    std::memcpy(out.data() + at + 4, k.data(), k.size());
  }
  return out;
}

bool decode_keys(const Bytes& in, std::vector<std::string>& keys) {
  uint32_t n = 0;
  if (in.size() < 4) return false;
  std::memcpy(&n, in.data(), 4);
  if (n > kMaxPresentKeys) return false;
  size_t at = 4;
  keys.clear();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t len = 0;
    if (in.size() - at < 4) return false;
    std::memcpy(&len, in.data() + at, 4);
    at += 4;
    if (len > kMaxKeyBytes || in.size() - at < len) return false;
    keys.emplace_back(reinterpret_cast<const char*>(in.data() + at), len);
    at += len;
  }
  return at == in.size();
}

Bytes encode_present(const std::vector<const Bytes*>& values) {
  Bytes out;
  for (const Bytes* v : values) {
    out.push_back(v ? 1 : 0);
    if (!v) continue;
    const auto len = static_cast<uint32_t>(v->size());
    const size_t at = out.size();
    out.resize(at + 4 + v->size());
    std::memcpy(out.data() + at, &len, 4);
    if (!v->empty()) std::memcpy(out.data() + at + 4, v->data(), v->size());
  }
  return out;
}

bool decode_present(const Bytes& in, size_t count, std::vector<std::optional<Bytes>>& out) {
  out.assign(count, std::nullopt);
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    if (at >= in.size() || in[at] > 1) return false;
    if (in[at++] == 0) continue;
    uint32_t len = 0;
    if (in.size() - at < 4) return false;
    std::memcpy(&len, in.data() + at, 4);
    at += 4;
    if (in.size() - at < len) return false;
    out[i] = Bytes(in.begin() + static_cast<ptrdiff_t>(at),
                   in.begin() + static_cast<ptrdiff_t>(at + len));
    at += len;
  }
  return at == in.size();
}

std::vector<std::optional<Bytes>> StoreClient::get_present(const std::vector<std::string>& keys) {
  std::vector<std::optional<Bytes>> out;
  out.reserve(keys.size());
  for (size_t first = 0; first < keys.size(); first += kMaxPresentKeys) {
    const std::vector<std::string> part(
        keys.begin() + static_cast<ptrdiff_t>(first),
        keys.begin() + static_cast<ptrdiff_t>(std::min(keys.size(), first + kMaxPresentKeys)));
    std::vector<std::optional<Bytes>> got;
    if (!decode_present(request(StoreOp::GetPresent, "", encode_keys(part), op_timeout()),
                        part.size(), got)) {
      throw PeerFailure("rendezvous store at " + address() + ": a malformed multi-key reply");
    }
    for (auto& g : got)
      out.push_back(std::move(g));
  }
  return out;
}

void StoreClient::erase(const std::string& key) {
  request(StoreOp::Delete, key, {}, op_timeout());
}

void StoreClient::hold(const std::string& key, const Bytes& value) {
  request(StoreOp::Hold, key, value, op_timeout());
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const auto& k : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    get(k, std::max(left, std::chrono::milliseconds(1)));
  }
}

}  // namespace rdmacoll::bootstrap
