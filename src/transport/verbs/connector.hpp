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
  // The store's first look at a watched key, then at most this long between looks (doubling,
  // each wait drawn from [3/4, 1] of it so that ranks waiting on the same late peer spread out):
  // hundreds of ranks waiting at once must not flood the one store.
  static constexpr std::chrono::microseconds kPollFirst{100};
  static constexpr std::chrono::microseconds kPollMax{50'000};

  // A store that fails (overloaded, a request timing out, a connection reset) is asked again
  // at the poll's pace; only a store failing for `give_up_after` on end fails the connections
  // waiting on it (one bad second must not fail every pair not yet connected).
  explicit Connector(std::shared_ptr<Store> store,
                     std::chrono::milliseconds give_up_after = std::chrono::seconds(60));
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
  // Store requests that failed and were made again.
  uint64_t store_errors() const;

 private:
  void run();
  void start_locked();  // with mu_ held
  void signal();

  std::shared_ptr<Store> store_;
  int wake_fd_ = -1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, Bytes>> posts_;
  std::vector<std::string> watched_;
  std::map<std::string, Bytes> arrived_;
  std::chrono::milliseconds give_up_after_;
  std::string error_;          // the store's failure, once it has failed for give_up_after_
  uint64_t store_errors_ = 0;  // failed looks, retried
  std::optional<std::chrono::steady_clock::time_point> failing_since_;
  bool look_now_ = false;  // a key was watched since the last look
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};
  std::thread thread_;  // started by the first post or watch
};

}  // namespace rdmacoll::transport::verbs_impl
