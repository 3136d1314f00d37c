#pragma once
// rdmacoll as a torch.distributed backend: a c10d::Backend (torch 2.x) or c10d::ProcessGroup
// (torch 1.13) whose collectives are rdmacoll's, issued as async work on the public C++ API.
//
// Groups: the default process group initializes rdmacoll's world over torch's store, and every
// later rdmacoll group of the process is a member group over its own store, sharing the world's
// transport. An rdmacoll group made while the default group is another backend's (gloo, NCCL)
// is a standalone group: a world of its members alone, with its own connections.
//
// Argument checks: a mistake only this rank can see (a CUDA tensor, a list of the wrong length)
// raises here at the call, and this rank still takes part in the group's call through
// rdmacoll::reject, so every other rank raises at its wait instead of timing out, and the
// group's calls stay in step. Mistakes between ranks (sizes, dtypes) are the core's to find.

#include <rdmacoll/rdmacoll.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tensors.hpp"
#include "torch_compat.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace rdmacoll_torch {

class RdmacollBackend final : public compat::Base {
 public:
  enum class Kind { World, Member, Standalone };

  RdmacollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout, Kind kind);
  ~RdmacollBackend() override;

  const std::string getBackendName() const override { return "rdmacoll"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

#if RDMACOLL_TORCH2
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  bool supportsCoalescing() const override {
    return true;
  }
  // The allocator hook of torch's FSDP2 (set_allocate_memory_from_process_group_for_comm): its
  // all-gather outputs and reduce-scatter inputs come from the group's symmetric memory, where
  // those calls take the one-copy path. No `override`: torch 2.x releases before the hook lack
  // these virtuals, and there they are plain members.
  bool supportsTensorAlloc(c10::DeviceIndex) {
    return true;  // CPU: the only device this backend is registered for
  }
  at::Tensor allocateTensor(long size, at::TensorOptions options = {});
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // destroy_process_group: drains the group's work, then frees it (the world waits for every
  // rank). abort: the same without waiting for other ranks.
  void shutdown() override {
    release(false);
  }
  void abort() override {
    release(true);
  }
#endif
#if RDMACOLL_TORCH_SHRINK
  // torch.distributed.shrink_group: a backend of the survivors over the same connections
  // (rdmacoll::shrink_group), made by each survivor alone, so dead ranks cannot hold it up.
  // Shrinking the group that made rdmacoll's world hands the world to the shrunk backend, which
  // torch makes the new default group. SHRINK_ABORT fails the parent's running and queued work
  // first (rdmacoll::ShrinkMode::AbortParent), for ranks that hang rather than die.
  bool supportsShrinking() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude,
                                           int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts) override;
  // The shrunk backend: `group` of `size` members, this rank `rank` in it.
  RdmacollBackend(rdmacoll::Group group, int rank, int size, Kind kind);
#endif
#if RDMACOLL_TORCH_SET_TIMEOUT
  // torch.distributed.set_timeout: the group's later calls take it (rdmacoll::set_timeout).
  void setTimeout(std::chrono::milliseconds timeout) override;
#endif

  // Frees the group (and, for the group that made the world, the world) once; without the GIL.
  void release(bool abort);

  // rdmacoll_torch.empty: a tensor in the group's symmetric memory (rdmacoll::empty, or with
  // zeroed false rdmacoll::empty_uninitialized); collective over the group. Without the GIL.
  at::Tensor empty_symmetric(const std::vector<int64_t>& sizes, at::ScalarType type,
                             bool zeroed = true);

 private:
  // A call being issued.
  struct Issue {
    c10d::OpType type;
    const char* title;                // the profiler's range: "rdmacoll:all_reduce"
    rdmacoll::Collective collective;  // what a refusal takes part in
  };

  // A mistake this rank sees alone: this rank's part of the group's call says why (so every
  // rank raises), then it raises here.
  [[noreturn]] void refuse(const Issue& call, const std::string& why);
  // Starts `start()` (an async rdmacoll call) and wraps it; `keep_alive` lives until it ends.
  c10::intrusive_ptr<c10d::Work> issue(const Issue& call, std::vector<at::Tensor> outputs,
                                       const std::vector<at::Tensor>& inputs,
                                       std::vector<at::Tensor> keep_alive,
                                       const std::function<rdmacoll::Work()>& start,
                                       std::function<void()> after = {});
  c10::intrusive_ptr<c10d::Work> completed(const Issue& call, std::vector<at::Tensor> outputs);
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(const Issue& call, at::Tensor& tensor,
                                                  const c10d::AllreduceOptions& opts);
  // One all_reduce over tensors of one dtype, packed into one buffer.
  c10::intrusive_ptr<c10d::Work> allreduce_packed(const Issue& call,
                                                  std::vector<at::Tensor> tensors,
                                                  const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_packed(const Issue& call,
                                                       std::vector<at::Tensor> outputs,
                                                       std::vector<at::Tensor> inputs,
                                                       const c10d::ReduceOp& op);
  int global_rank(int group_rank) const;
  // recv and recvAnysource (src_rank -1).
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int src_rank, int tag);
  // Why a root (rank, tensor index) is not one of this group's, or "".
  std::string bad_root(int64_t root_rank, int64_t root_tensor) const;

  rdmacoll::Group group_;
  StagingPool staging_;  // outputs gathered here, then copied out
  Kind kind_;
  bool released_ = false;
  std::mutex release_mutex_;
  // startCoalescing .. endCoalescing: the works issued meanwhile.
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
};

// At interpreter exit: a world still initialized means the script did not call
// destroy_process_group (an uncaught exception, Ctrl-C, sys.exit): leave at once, so the other
// ranks raise PeerFailure now instead of waiting for this one until their timeout.
void leave_at_exit();

}  // namespace rdmacoll_torch
