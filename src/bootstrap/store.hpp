#pragma once
// Rendezvous key-value store over TCP, like torch's TCPStore: rank 0 hosts a StoreServer on
// MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) talks to it through a StoreClient.
//
// Wire format, one frame per request and per reply:
//   u32 magic 'RDCS' | u8 op | u8 status | u16 reserved | u32 key_len | u32 value_len | key | value
// On connect the server sends a Challenge (a fresh nonce; status 1 when it holds a token); the
// client answers Hello (key: its job id, value: HMAC-SHA256(token, nonce || job id), or empty)
// before anything else, and a mismatch gets a Rejected reply saying why, then the close.
// The server never blocks on one client: sockets are non-blocking, replies queue per
// connection, and frames, buffered bytes, connections and half-sent frames are capped
// (StoreLimits). Frames with a bad magic, an unknown op or oversized fields make the server
// drop that connection (and log it); they never crash it or stall other clients.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rdmacoll/errors.hpp"
#include "rdmacoll/store.hpp"

namespace rdmacoll::bootstrap {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

enum class StoreOp : uint8_t {
  Set = 1,
  Get = 2,
  Add = 3,
  Check = 4,
  Delete = 5,
  Ping = 6,
  Challenge = 7,   // server -> client, first frame
  Hello = 8,       // client -> server, the answer
  GetPresent = 9,  // the keys (value: encode_keys) -> what is there (encode_present)
  Hold = 10,       // as Set, and the server deletes the key when this connection closes
};

// GetPresent's request (a count, then each key's length and bytes) and reply (per key a
// present byte, then a present value's length and bytes). decode_* refuse what is not well
// formed: a key past kMaxKeyBytes, more than kMaxPresentKeys keys, a length past the end.
inline constexpr uint32_t kMaxPresentKeys = 4096;
Bytes encode_keys(const std::vector<std::string>& keys);
bool decode_keys(const Bytes& in, std::vector<std::string>& keys);
Bytes encode_present(const std::vector<const Bytes*>& values);  // nullptr: missing
bool decode_present(const Bytes& in, size_t count, std::vector<std::optional<Bytes>>& out);

// Who may use a store: the job's secret (empty: anyone who can connect) and its id (empty
// matches only empty). The server's must equal the client's.
struct StoreCredentials {
  std::string token;
  std::string job_id;
};

// What one client can make the server hold. Defaults suit jobs of thousands of ranks. Every
// byte queued for a connection counts against its cap, replies included, so a client that
// pipelines requests for a large value is dropped, not served into memory it never reads.
struct StoreLimits {
  // Connections in all; the server lowers it to leave descriptors for the job's own sockets and
  // transport (StoreServer: a quarter of RLIMIT_NOFILE, at least 128).
  size_t max_connections = 8192;
  // Connections that have not answered the challenge yet, in all and from one address: past
  // either, the oldest of them is dropped, so a flood cannot keep the job's ranks out. A host's
  // ranks all connect from its address at once, and a CPU node runs 64 of them: below that,
  // ranks starting together on a loaded host were shed (to connect again) with a warning.
  size_t max_unproven = 256;
  size_t max_unproven_per_address = 64;
  size_t max_pending_gets_per_connection = 16;               // a client waits on one at a time
  size_t max_held_per_connection = 16;                       // keys Hold ties to a connection
  size_t max_buffered_per_connection = (64u << 20) + 16384;  // one largest frame, in or out
  size_t max_buffered_total = 512u << 20;                    // every connection's buffers
  size_t max_stored_bytes = 1u << 30;                        // keys and values kept
  size_t max_hello_frame = 4096;                     // before a connection has proven itself
  std::chrono::milliseconds hello_deadline{10'000};  // to prove itself after connecting
  std::chrono::milliseconds frame_deadline{30'000};  // to finish a frame once begun
};

inline constexpr uint32_t kStoreMagic = 0x52444353;  // "RDCS"
inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxValueBytes = 64u << 20;

// The port a StoreServer was to bind is held by another process (maybe another job's store).
class PortInUse : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

class StoreServer {
 public:
  // Binds host:port (port 0 picks a free one). Throws PortInUse, or InvalidArgument naming the
  // address when it cannot be bound.
  StoreServer(const std::string& host, uint16_t port, StoreCredentials credentials = {},
              StoreLimits limits = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const { return port_; }
  // Refuses new connections from now on (existing ones are still served), so that a rank
  // re-initializing on the same port cannot reach this old store: destroy_process_group()
  // calls it before the final handshake.
  void stop_accepting();
  // Connections dropped for malformed frames, failed proofs or limits (for tests).
  uint64_t rejected_connections() const { return rejected_.load(); }
  // The last processes refused at the hello (address: why), for rank 0's timeout message: a
  // rank with a wrong token or job id is then named, not only "did not join".
  std::vector<std::string> refusals() const;

 private:
  void serve();

  StoreCredentials credentials_;
  StoreLimits limits_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<uint64_t> rejected_{0};
  std::atomic<bool> accepting_{true};
  mutable std::mutex refusals_mutex_;
  std::vector<std::string> refusals_;
  std::thread thread_;
};

class StoreClient final : public Store {
 public:
  // Connects, retrying while the server is not up yet, until `deadline`, and proves the
  // credentials. Throws InvalidArgument when the server rejects them (another job's store, a
  // wrong or missing RDMACOLL_AUTH_TOKEN), Timeout when it cannot be reached.
  StoreClient(const std::string& host, uint16_t port, Clock::time_point deadline,
              const StoreCredentials& credentials = {});
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  using Store::get_string;
  using Store::set;
  void set(const std::string& key, const Bytes& value) override;
  // Blocks until the key exists or the timeout passes (Timeout names the key).
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  // One request for all of them (split past kMaxPresentKeys).
  std::vector<std::optional<Bytes>> get_present(const std::vector<std::string>& keys) override;
  std::string describe() const override { return "rendezvous store at " + address(); }
  void erase(const std::string& key);
  // Sets `key` for as long as this client's connection lives: the server deletes it when the
  // connection closes, as it does when the process dies (a rank's liveness across hosts, where
  // no pidfd reaches).
  void hold(const std::string& key, const Bytes& value);
  // Blocks until every key exists.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::string address() const { return host_ + ":" + std::to_string(port_); }
  // How long set, add, check and erase wait for the server's answer (a stopped rank 0 answers
  // never): the job's timeout, and after a failure the short cleanup grace. 60 s until set.
  void set_op_timeout(std::chrono::milliseconds timeout) { op_timeout_ms_ = timeout.count(); }
  std::chrono::milliseconds op_timeout() const {
    return std::chrono::milliseconds(op_timeout_ms_.load());
  }

 private:
  void prove(const StoreCredentials& credentials, Clock::time_point deadline);
  void prove_on(const StoreCredentials& credentials, Clock::time_point until,
                const std::string& what);
  Bytes request(StoreOp op, const std::string& key, const Bytes& value,
                std::chrono::milliseconds timeout);
  // Our reply's meaning: Check's answer, Get's "missing" as a Timeout.
  Bytes finish_reply(StoreOp op, const std::string& key, std::chrono::milliseconds timeout,
                     int status, Bytes out);

  std::mutex mutex_;
  std::atomic<int64_t> op_timeout_ms_{60'000};
  int fd_ = -1;
  std::string host_;
  uint16_t port_;
};

}  // namespace rdmacoll::bootstrap
