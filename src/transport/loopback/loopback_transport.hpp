#pragma once
// An in-process transport: the ranks of one world as threads of one process, each with its own
// endpoint on a shared Fabric. It implements the interface for real, not as a mock: control
// messages are matched by (source, tag) with the truncation and ordering rules of UCX's tag
// matching, one-sided writes land at the receiver's offset and complete its expect (early
// writes are counted until it is posted), mappable memory is shared by address (so a group's
// mailbox works as on one host), a peer's memory can be read (Fabric::allow_reads), and blocking
// waits block on an eventfd. Deterministic, and with faults to inject: a killed rank (its peers'
// requests fail, as a dead process's would), a link held (messages and writes from one rank to
// another queue until released), messages dropped. The engine's collectives run on it in
// milliseconds, every group size in one ctest process
// (tests/unit/engine/engine_inprocess_test.cpp); the real-process tests stay.

#include <functional>
#include <memory>
#include <string>

#include "transport/transport.hpp"

namespace rdmacoll::transport::loopback {

class Fabric {
 public:
  explicit Fabric(int world_size, size_t max_message_bytes = SIZE_MAX);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Rank `rank`'s endpoint (once per rank; the fabric outlives its endpoints).
  std::unique_ptr<Transport> endpoint(int rank);

  // `rank` dies: requests to it fail, its peers' peer_failure() names it, and its own calls fail.
  void kill(int rank);
  // While held, what `from` sends or writes to `to` waits (in order); release() delivers it.
  void hold(int from, int to);
  void release(int from, int to);
  // The next `n` control messages from `from` to `to` vanish.
  void drop(int from, int to, int n);
  // Whether read_peer() copies out of a peer's memory (off by default, so that the engine's
  // tests of writes keep taking writes), and a rank whose memory no peer can read (read_peer()
  // throws, as a read of an address a peer never mapped does).
  void allow_reads(bool on);
  void refuse_reads_from(int rank);
  // Runs before each read's copy, on the reader's thread: (reader, peer read from).
  void on_read(std::function<void(int, int)> hook);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace rdmacoll::transport::loopback
