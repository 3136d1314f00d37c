#pragma once
// The store I/O of connection setup (QP numbers, "up" marks), on a thread of its own. The
// transport runs under the process-wide transport lock; a store round trip there (to rank 0,
// perhaps loaded, perhaps across the fabric) held every group's calls up while one group made
// its first contact. Now the transport only hands keys to post and keys to watch to the
// connector and takes what has come, never waiting on the store; a readable fd wakes a
// sleeping transport when something comes.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rdmacoll/store.hpp"

namespace rdmacoll::transport::verbs_impl {

class Connector {
 public:
  using Bytes = std::vector<uint8_t>;
  // The store's first look at a watched key, then at most this long between looks (doubling).
  static constexpr std::chrono::microseconds kPollFirst{100};
  static constexpr std::chrono::microseconds kPollMax{10'000};

  explicit Connector(std::shared_ptr<Store> store);
  // Stops the thread; it finishes the store request in hand first (bounded by the store's own
  // timeout, the short cleanup grace after a failure).
  ~Connector();
  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  // Posts `value` under `key`, in the order posted.
  void post(std::string key, Bytes value);
  // Looks for `key` on the store until it comes; take() hands it over.
  void watch(std::string key);
  // Stops looking for `key` (its peer failed) and forgets it if it came.
  void unwatch(const std::string& key);
  // A watched key's value once it has come (then forgotten), else nullopt. Throws
  // TransportError, naming the store, when the store failed.
  std::optional<Bytes> take(const std::string& key);
  // Counts what has come (and failures): the transport looks at its connections only when it
  // has changed.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Readable when something has come since the last clear_wake(), which says whether it was.
  int wake_fd() const { return wake_fd_; }
  bool clear_wake();

 private:
  void run();
  void start_locked();  // with mu_ held
  void signal();

  std::shared_ptr<Store> store_;
  int wake_fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, Bytes>> posts_;
  std::vector<std::string> watched_;
  std::map<std::string, Bytes> arrived_;
  std::string error_;      // the store's failure, once it has failed
  bool look_now_ = false;  // a key was watched since the last look
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};
  std::thread thread_;  // started by the first post or watch
};

}  // namespace rdmacoll::transport::verbs_impl
