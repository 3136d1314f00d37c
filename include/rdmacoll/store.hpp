#pragma once
// The key-value store a process group rendezvouses through, as torch.distributed's Store.
// init_process_group() makes its own (a TCP store hosted by rank 0) unless InitOptions::store
// hands it one; new_member_group() takes the store its members share. An implementation wraps
// any store the caller has (the torch backend wraps torch's): the calls below are all rdmacoll
// uses, each bounded by a timeout. Implementations must be safe to call from several threads.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rdmacoll/export.hpp"

namespace rdmacoll {

class RDMACOLL_API Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until `key` exists; throws Timeout (naming the key) when `timeout` passes first, and
  // PeerFailure when the store itself went away.
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer at `key` (missing: 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Whether `key` exists now, without waiting.
  virtual bool check(const std::string& key) = 0;
  // The values of those `keys` that exist now (nullopt for the others), without waiting: one
  // request where the store can (rdmacoll's own store), else a check and a get per key. Who
  // watches many keys at once (the verbs connector) polls with this.
  virtual std::vector<std::optional<std::vector<uint8_t>>> get_present(
      const std::vector<std::string>& keys) {
    std::vector<std::optional<std::vector<uint8_t>>> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (check(keys[i])) out[i] = get(keys[i], std::chrono::seconds(10));
    }
    return out;
  }
  // Where the store is, for messages ("rendezvous store at 10.0.0.1:29500").
  virtual std::string describe() const { return "the store"; }

  void set(const std::string& key, const std::string& value) {
    set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key, std::chrono::milliseconds timeout) {
    const std::vector<uint8_t> v = get(key, timeout);
    return std::string(v.begin(), v.end());
  }
};

}  // namespace rdmacoll
