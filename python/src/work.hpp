#pragma once
// A c10d::Work over an rdmacoll::Work, with the future DDP's reducer and torch's comm hooks
// chain on.

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <rdmacoll/work.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "torch_compat.hpp"

namespace rdmacoll_torch {

// rdmacoll's errors as torch's: a mistake in the arguments is a RuntimeError, a failure of the
// communication (Timeout, PeerFailure, TransportError) torch.distributed.DistBackendError where
// torch has it; either says "rdmacoll: ".
std::exception_ptr to_torch_error(std::exception_ptr error);

class WorkRdmacoll final : public c10d::Work {
 public:
  // `title` names the range the torch profiler shows ("rdmacoll:all_reduce", as gloo's
  // "gloo:all_reduce"); `inputs` are recorded with it when the profiler records shapes.
  WorkRdmacoll(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
               const std::vector<at::Tensor>& inputs);

  // Runs once, right after construction. The collective's tensors (`keep_alive`: inputs,
  // outputs, staging copies) are held by its completion, not by this handle: a caller that
  // keeps only the future (torch's quantization hook does) must not free an input the group's
  // worker still reads. `after` runs once the collective succeeded (copies out of staging).
  void arm(const rdmacoll::Work& work, std::vector<at::Tensor> keep_alive,
           std::function<void()> after = {});

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // A recv's sender, as a rank of the group whose members (global ranks, in group rank order)
  // are `members` (empty: the world).
  int sourceRank() const override;
  void set_members(std::vector<int> members) { members_ = std::move(members); }
  // The rdmacoll work underneath (endCoalescing waits for all of a batch's).
  const rdmacoll::Work& core() const { return work_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  rdmacoll::Work work_;
  std::vector<at::Tensor> outputs_;
  std::vector<int> members_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace rdmacoll_torch
