#pragma once
// The handle of a collective issued with async_op = true, as torch.distributed's Work: the
// caller's thread is free until it waits. Operations on one group complete in issue order.

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "rdmacoll/export.hpp"

namespace rdmacoll {

namespace detail {
class WorkState;  // the library's; opaque here
}  // namespace detail

class RDMACOLL_API Work {
 public:
  // A completed work: what a blocking call returns.
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  bool is_completed() const;
  // Waits until the collective has finished and rethrows its error (InvalidArgument, Timeout,
  // PeerFailure, ...). With a timeout, throws Timeout if it has not finished by then; it keeps
  // running, bounded by the group's own timeout. Returns true, as torch's Work::wait does.
  bool wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;
  // The collective's error once it has completed with one, else null.
  std::exception_ptr exception() const;
  // Calls `callback(error)` (null on success) once the collective has completed: at once on
  // this thread if it already has, else on the thread that completes it (the group's worker),
  // before wait() returns. For futures (the torch backend's getFuture()); keep it short, it
  // delays the group's next operation. A callback that throws makes its exception the work's
  // error; one may destroy the group or drop its last handle.
  void on_completion(std::function<void(std::exception_ptr)> callback) const;
  // For a recv: the sender's global rank once known (a recv from kAnySource learns it when the
  // message comes), else -1.
  int source_rank() const;

 private:
  friend Work when_all(const std::vector<Work>& works);
  std::shared_ptr<detail::WorkState> state_;
};

// A work that completes when every one of `works` has, with the first error among them (as
// MPI_Waitall): what torch's batch_isend_irecv returns for a coalesced batch.
RDMACOLL_API Work when_all(const std::vector<Work>& works);

}  // namespace rdmacoll
