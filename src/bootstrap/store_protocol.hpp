#pragma once
// The rendezvous store's wire protocol and the server's side of it, without sockets: frames,
// the challenge and hello, requests, waits and every limit. store.cpp's StoreServer moves bytes
// between sockets and a StoreState; the unit tests and the fuzz target drive a StoreState
// directly.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/store.hpp"

namespace rdmacoll::bootstrap {

struct FrameHeader {
  uint32_t magic;
  uint8_t op;
  uint8_t status;
  uint16_t reserved;
  uint32_t key_len;
  uint32_t value_len;
};
static_assert(sizeof(FrameHeader) == 16);

enum Status : uint8_t { kOk = 0, kMissing = 1, kRejected = 2 };

Bytes make_frame(uint8_t op, uint8_t status, const std::string& key, const Bytes& value);
Bytes int_bytes(int64_t v);

struct Connection {
  int fd;
  uint32_t address = 0;  // the peer's IPv4 address (host order), for the per-address cap
  Clock::time_point accepted;
  bool proven = false;  // answered the challenge
  size_t pending_gets = 0;
  std::vector<std::string> held;  // keys deleted when the connection goes (StoreOp::Hold)
  Bytes inbuf;
  Bytes outbuf;  // queued replies; out_sent of them already written
  size_t out_sent = 0;
  bool closing = false;        // drop once outbuf is flushed (a rejection)
  Clock::time_point deadline;  // for the Hello, then for a frame begun in inbuf
  size_t buffered() const { return inbuf.size() + outbuf.size() - out_sent; }
};

struct PendingGet {
  int fd;
  std::string key;
  Clock::time_point deadline;  // the server answers "missing" then, keeping the stream in step
};

// Server-side state, touched only by the server thread. Replies go to per-connection queues;
// serve() writes them when the socket takes them.
class StoreState {
 public:
  StoreState(const StoreCredentials& creds, const StoreLimits& limits)
      : creds_(creds), limits_(limits) {}

  // A new connection from `address` (IPv4, host order). Returns the connections to drop to make
  // room: the oldest unproven ones past max_unproven or max_unproven_per_address.
  std::vector<int> accept(int fd, uint32_t address = 0);
  size_t connections() const { return conns_.size(); }
  // Connections whose queued replies went past a cap (a Set woke their Gets): drop them.
  std::vector<std::pair<int, std::string>> take_overflowed();
  // Why hellos were refused since the last call ("10.0.0.5: ..."), for rank 0's messages.
  std::vector<std::string> take_refusals();
  std::map<int, Connection>& conns() { return conns_; }

  // Takes bytes read from c; false when the connection must be dropped (`why` says why, empty
  // for an orderly end).
  bool receive(Connection& c, const uint8_t* data, size_t n, std::string& why);

  // Answers expired waits and drops connections past their deadline; returns the poll timeout
  // (ms) until the next deadline, -1 if none.
  int expire(std::vector<std::pair<int, std::string>>& drop);

  void drop(int fd);

 private:
  size_t total_buffered() const;
  // Queues a reply; false (and nothing queued) when it would pass the connection's or the
  // server's cap.
  bool queue(Connection& c, StoreOp op, uint8_t status, const Bytes& value);
  void reject(Connection& c, const std::string& why);
  bool consume(Connection& c, std::string& why);
  void hello(Connection& c, const std::string& job_id, const Bytes& proof);
  bool handle(Connection& c, StoreOp op, const std::string& key, Bytes value, std::string& why);
  bool store(const std::string& key, Bytes value, std::string& why);
  void wake_waiters(const std::string& key);

  const StoreCredentials& creds_;
  const StoreLimits& limits_;
  std::map<int, Connection> conns_;
  std::map<int, Bytes> nonce_;
  std::map<std::string, Bytes> data_;
  size_t stored_ = 0;
  std::vector<PendingGet> pending_;
  std::vector<std::pair<int, std::string>> overflowed_;
  std::vector<std::string> refusals_;
};

}  // namespace rdmacoll::bootstrap
