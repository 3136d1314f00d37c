#pragma once
// The launcher's PMIx server (mpirun, srun --mpi=pmix, PRRTE, Flux) as a rendezvous: it tells
// each process its rank, the job's size and who shares its node, and its fence exchanges every
// rank's values through the launcher's own tree, with no address, port or secret from the
// user. The only file that includes PMIx's header (pmix.cpp; pmix_absent.cpp in a build
// without libpmix).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rdmacoll::bootstrap {

using Bytes = std::vector<uint8_t>;

// Whether this build can use PMIx at all (libpmix was found at build time).
bool pmix_built_in();
// Whether the process was started by a PMIx launcher: PMIX_NAMESPACE and PMIX_RANK are set.
bool pmix_launched();

// One PMIx_Init .. PMIx_Finalize. Shared: the rendezvous and whatever must outlive it (a
// fence still in flight when a rank leaves without waiting) hold it.
class PmixSession {
 public:
  // Connects to the launcher's server. Throws InvalidArgument saying why when none answers (no
  // launcher, a build without PMIx), naming `where`.
  static std::shared_ptr<PmixSession> connect(const std::string& where);
  ~PmixSession();
  PmixSession(const PmixSession&) = delete;
  PmixSession& operator=(const PmixSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // The launcher's namespace: the job's identity, unique among the jobs it runs.
  const std::string& nspace() const { return nspace_; }

  // Every rank's value under `key`, in rank order: one put and commit, one fence that collects
  // the data, and a local read per rank. Throws Timeout when the fence does not complete within
  // `timeout` (a rank never came), Error for what else the server says.
  std::vector<Bytes> all_gather(const std::string& key, const Bytes& mine,
                                std::chrono::milliseconds timeout);
  // A fence without data among every rank: returns false when it did not complete in time.
  bool fence(std::chrono::milliseconds timeout);
  // This rank's part of the next fence, without waiting for it (a rank leaving at once must not
  // keep the others in their fence). The session lives until exit, so the fence can complete.
  void join_fence_without_waiting();

  struct State;

 private:
  PmixSession() = default;
  std::unique_ptr<State> state_;
  int rank_ = -1;
  int size_ = 0;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string nspace_;
};

}  // namespace rdmacoll::bootstrap
