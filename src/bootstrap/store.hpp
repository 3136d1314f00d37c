#pragma once
// Rendezvous key-value store over TCP, like torch's TCPStore: rank 0 hosts a StoreServer on
// MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) talks to it through a StoreClient.
//
// Wire format, one frame per request and per reply:
//   u32 magic 'RDCS' | u8 op | u8 status | u16 reserved | u32 key_len | u32 value_len | key | value
// Frames with a bad magic, an unknown op or oversized fields make the server drop that
// connection (and log it); they never crash it or stall other clients.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rdmacoll/store.hpp"

namespace rdmacoll::bootstrap {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

enum class StoreOp : uint8_t { Set = 1, Get = 2, Add = 3, Check = 4, Delete = 5, Ping = 6 };

inline constexpr uint32_t kStoreMagic = 0x52444353;  // "RDCS"
inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxValueBytes = 64u << 20;

class StoreServer {
 public:
  // Binds host:port (port 0 picks a free one). Throws InvalidArgument naming the address when
  // the port is in use or the address cannot be bound.
  StoreServer(const std::string& host, uint16_t port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const { return port_; }
  // Refuses new connections from now on (existing ones are still served), so that a rank
  // re-initializing on the same port cannot reach this old store: destroy_process_group()
  // calls it before the final handshake.
  void stop_accepting();
  // Connections dropped for malformed frames (for tests).
  uint64_t rejected_connections() const { return rejected_.load(); }

 private:
  void serve();

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<uint64_t> rejected_{0};
  std::atomic<bool> accepting_{true};
  std::thread thread_;
};

class StoreClient final : public Store {
 public:
  // Connects, retrying while the server is not up yet, until `deadline`.
  StoreClient(const std::string& host, uint16_t port, Clock::time_point deadline);
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
  std::string describe() const override { return "rendezvous store at " + address(); }
  void erase(const std::string& key);
  // Blocks until every key exists.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  Bytes request(StoreOp op, const std::string& key, const Bytes& value,
                std::chrono::milliseconds timeout);

  std::mutex mutex_;
  int fd_ = -1;
  std::string host_;
  uint16_t port_;
};

}  // namespace rdmacoll::bootstrap
