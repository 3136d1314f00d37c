#pragma once
// How the ranks of a world meet, agree and part: through a key-value store, our TCP store
// (rank 0 hosts it) or the caller's (torch's, prefixed per world); or through the launcher's
// PMIx server, whose fences carry the exchanges and the parting. Under PMIx a store is opened
// only for a transport that connects peers on first use (verbs): rank 0 hosts it on a port it
// picks and every rank finds it, with its secret, through PMIx. Every wait is bounded by the
// world's timeout and raises at once when a rank gives up (it posts why); rank numbers are
// claimed once; the settings every rank must share are compared; and at the end every rank is
// done with the store before rank 0 takes it away. Store I/O only: nothing here knows
// transports, topology or the engine (src/api/world.cpp puts those together).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/init_method.hpp"
#include "bootstrap/pmix.hpp"
#include "bootstrap/store.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/store.hpp"

namespace rdmacoll::bootstrap {

struct RendezvousOptions {
  int rank = -1;
  int world_size = -1;
  std::chrono::milliseconds timeout{0};
  // The caller's store (every rank passes the same one); null: our TCP store at `target`.
  std::shared_ptr<Store> store;
  // The launcher's PMIx server (rank and world_size are its); null: a store.
  std::shared_ptr<PmixSession> pmix;
  InitTarget target;
  // For messages: "init_process_group (rank 3 of 8)".
  std::string where;
};

class Rendezvous {
 public:
  // Joins: rank 0 hosts our store (or every rank takes its prefix of the caller's), the rank is
  // claimed, and the world size is compared with rank 0's.
  explicit Rendezvous(const RendezvousOptions& options);
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
  ~Rendezvous();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The store; null in a world met through PMIx until open_store().
  const std::shared_ptr<Store>& store() const { return store_; }
  // Under PMIx, opens rank 0's store for this world (every rank calls it, at the same point);
  // with a store already, nothing.
  void open_store();
  // For messages: "rendezvous store at 10.0.0.1:29500", "PMIx namespace 1885011969".
  std::string describe() const;

  // Publishes `mine` as `prefix`<rank> and returns every rank's, in rank order. Raises
  // InvalidArgument at once when a rank posts an abort, PeerFailure when the store goes away,
  // and Timeout naming the ranks that never came (and whom rank 0's store refused).
  std::vector<Bytes> all_gather(const std::string& prefix, const Bytes& mine);
  // Every rank still in the rendezvous raises InvalidArgument(why); rank 0 keeps its store up
  // until they have read it (a short grace).
  [[noreturn]] void abort(const std::string& why);
  // "NAME=value" lines every rank must share: when any differs, every rank raises, naming the
  // variable and each rank's value.
  void compare(const std::string& lines);

  // Parting, in two halves around the transport's end: arrive() waits until every rank is done
  // with the transport; depart() lets rank 0 leave last, once the others have closed. After a
  // failure (`failed`) both fit in one short grace together, not the timeout. Neither waits for
  // a rank `known_dead` names (this process's liveness: its transport's failure marks and
  // pidfds, asked again while arrive() waits) or, asked by rank 0, whose connection to our own
  // store closed (StoreClient::hold); one rank that knows is enough to
  // release the others, who may not. No rank connects anew from arrive() on: rank 0's store stops
  // accepting, so a rank that initializes again on the same port reaches the next store, not
  // this one.
  using KnownDead = std::function<std::vector<bool>()>;
  void arrive(bool failed, const KnownDead& known_dead);
  void depart(bool failed);
  // Parting without waiting for anyone (abort_process_group): this rank counts itself in, so
  // ranks that part normally are not kept waiting for it. Best effort, within a quarter of a
  // second.
  void leave();

 private:
  [[noreturn]] void rethrow_with_context(const Error& e) const;
  void claim_rank();
  // Held by the rank's store connection (claim_rank); set when it arrives at destroy.
  static std::string alive_key(int rank);
  static std::string arrived_key(int rank);
  void store_lost(std::vector<bool>& dead);
  void acknowledge_abort();
  Bytes wait_for(const std::string& key, Clock::time_point deadline);
  std::chrono::milliseconds grace() const;
  std::chrono::milliseconds grace_left() const;

  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  std::string where_;
  std::unique_ptr<StoreServer> server_;  // rank 0 of our own store
  std::shared_ptr<PmixSession> pmix_;    // meeting through the launcher
  std::shared_ptr<Store> store_;         // a StoreClient of it, or the caller's, prefixed
  bool own_store_ = false;
  Clock::time_point grace_end_{};
  int missing_ = 0;  // ranks known dead that never arrived: depart() does not wait for them
};

// The job's secret and id: RDMACOLL_AUTH_TOKEN; RDMACOLL_JOB_ID, else the launcher's own
// (torchrun's run id, Slurm's job id, Open MPI's job id), else none.
StoreCredentials store_credentials();

}  // namespace rdmacoll::bootstrap
