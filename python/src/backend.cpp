#include "backend.hpp"

#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <variant>

#include "tensors.hpp"
#include "torch_store.hpp"
#include "work.hpp"

namespace rdmacoll_torch {

namespace {

using c10d::OpType;
using rdmacoll::Collective;

RdmacollBackend* world_owner = nullptr;  // the backend that made rdmacoll's world, if alive
std::mutex world_mutex;

// Lets go of the GIL for a scope if this thread holds it: a collective or a teardown must not
// hold it, since the group's worker may need it (to free tensors, run a future's callback).
class WithoutGil {
 public:
  WithoutGil() {
    if (Py_IsInitialized() && PyGILState_Check()) released_.emplace();
  }

 private:
  std::optional<py::gil_scoped_release> released_;
};

}  // namespace

RdmacollBackend::RdmacollBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 std::chrono::milliseconds timeout, Kind kind)
    : compat::Base(rank, size), kind_(kind) {
  auto ours = std::make_shared<TorchStore>(store);
  std::lock_guard lock(world_mutex);
  try {
    switch (kind) {
      case Kind::World: {
        // A default group made again (init after destroy) replaces the world.
        if (rdmacoll::is_initialized()) rdmacoll::destroy_process_group();
        rdmacoll::InitOptions o;
        o.store = ours;
        o.rank = rank;
        o.world_size = size;
        o.timeout = timeout;
        rdmacoll::init_process_group(o);
        world_owner = this;
        group_ = rdmacoll::Group();
        break;
      }
      case Kind::Member:
        group_ = rdmacoll::new_member_group(ours, rank, size, timeout);
        break;
      case Kind::Standalone:
        group_ = rdmacoll::new_standalone_group(ours, rank, size, timeout);
        break;
    }
  } catch (const rdmacoll::InvalidArgument&) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  } catch (const rdmacoll::Error& e) {
    // The group's rendezvous over torch's store: a rank that never came, a store gone away.
    std::rethrow_exception(compat::store_error(std::string("rdmacoll: ") + e.what()));
  }
#if !RDMACOLL_TORCH2
  init();
#endif
}

#if RDMACOLL_TORCH_SHRINK
RdmacollBackend::RdmacollBackend(rdmacoll::Group group, int rank, int size, Kind kind)
    : compat::Base(rank, size), group_(std::move(group)), kind_(kind) {}

c10::intrusive_ptr<c10d::Backend> RdmacollBackend::shrink(
    const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<Options>& /*opts*/) {
  WithoutGil no_gil;
  std::lock_guard lock(world_mutex);
  std::vector<int> excluded;
  for (int64_t r : ranks_to_exclude)
    excluded.push_back(static_cast<int>(std::clamp<int64_t>(r, -1, INT32_MAX)));
  rdmacoll::Group shrunk;
  try {
    constexpr int kShrinkAbort = 1;  // torch.distributed.SHRINK_ABORT
    shrunk =
        rdmacoll::shrink_group(group_, excluded,
                               (shrink_flags & kShrinkAbort) ? rdmacoll::ShrinkMode::AbortParent
                                                             : rdmacoll::ShrinkMode::Default);
  } catch (const rdmacoll::InvalidArgument&) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  }
  const int rank = rdmacoll::get_rank(shrunk);
  const int size = rdmacoll::get_world_size(shrunk);
  // A member group of the default world, as the world's own groups are; a standalone group's
  // survivors stay on that group's world.
  const Kind kind = kind_ == Kind::Standalone ? Kind::Standalone : Kind::Member;
  auto b = c10::make_intrusive<RdmacollBackend>(std::move(shrunk), rank, size, kind);
  if (world_owner == this) world_owner = b.get();  // the world now ends with the survivors
  return b;
}
#endif

#if RDMACOLL_TORCH_SET_TIMEOUT
void RdmacollBackend::setTimeout(std::chrono::milliseconds timeout) {
  try {
    rdmacoll::set_timeout(timeout, group_);
  } catch (const rdmacoll::InvalidArgument&) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  }
}
#endif

RdmacollBackend::~RdmacollBackend() {
  release(false);
}

void RdmacollBackend::release(bool abort) {
  std::lock_guard once(release_mutex_);
  if (released_) return;
  released_ = true;
  // Python may free the group holding the GIL, and freeing waits for the group's worker, which
  // may need the GIL to free the tensors of its last work or run a future's Python callback.
  WithoutGil no_gil;
  std::lock_guard lock(world_mutex);
  try {
    if (world_owner == this) {
      world_owner = nullptr;
      if (abort) {
        rdmacoll::abort_process_group();
      } else {
        rdmacoll::destroy_process_group();
      }
    } else if (!group_.is_default() && kind_ != Kind::World) {
      rdmacoll::destroy_group(group_);
    }
  } catch (const std::exception&) {
    // A world already gone (destroyed by a newer default group) or a failed peer: nothing is
    // left to free.
  }
}

int RdmacollBackend::global_rank(int group_rank) const {
  return group_.is_default() ? group_rank : group_.ranks().at(group_rank);
}

void RdmacollBackend::refuse(const Issue& call, const std::string& why) {
  try {
    (void)rdmacoll::reject(call.collective, why, group_, true);
  } catch (const rdmacoll::Error&) {
    // The group cannot run the call at all (broken, destroyed): this rank raises regardless.
  }
  std::rethrow_exception(
      compat::argument_error(std::string("rdmacoll: ") + call.title + ": " + why));
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::issue(const Issue& call,
                                                      std::vector<at::Tensor> outputs,
                                                      const std::vector<at::Tensor>& inputs,
                                                      std::vector<at::Tensor> keep_alive,
                                                      const std::function<rdmacoll::Work()>& start,
                                                      std::function<void()> after) {
  rdmacoll::Work w;
  try {
    w = start();
  } catch (const rdmacoll::Error&) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  }
  auto work = c10::make_intrusive<WorkRdmacoll>(rank_, call.type, call.title, outputs, inputs);
  for (auto& t : outputs)
    keep_alive.push_back(t);
  work->arm(w, std::move(keep_alive), std::move(after));
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::completed(const Issue& call,
                                                          std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<WorkRdmacoll>(rank_, call.type, call.title, outputs,
                                                std::vector<at::Tensor>{});
  work->arm(rdmacoll::Work(), {});
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  const Issue call{OpType::BROADCAST, "rdmacoll:broadcast", Collective::Broadcast};
  if (tensors.size() != 1) refuse(call, tensor_count("broadcast", tensors.size(), "1"));
  if (auto why = unusable(tensors[0], "the tensor")) refuse(call, *why);
  if (opts.rootRank < 0 || opts.rootRank >= size_ || opts.rootTensor != 0) {
    refuse(call, "root rank " + std::to_string(opts.rootRank) + " (tensor " +
                     std::to_string(opts.rootTensor) + ") is not a rank of this group of " +
                     std::to_string(size_));
  }
  const Staged t = stage_output(tensors[0], false, /*in_place=*/true);
  const int src = global_rank(static_cast<int>(opts.rootRank));
  rdmacoll::Tensor v = t.view;
  return issue(
      call, tensors, {}, {t.dense}, [&] { return rdmacoll::broadcast(v, src, group_, true); },
      [t] { copy_back(t); });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::_allgather_base(at::Tensor& output,
                                                                at::Tensor& input,
                                                                const c10d::AllgatherOptions&) {
  const Issue call{OpType::_ALLGATHER_BASE, "rdmacoll:all_gather_into_tensor",
                   Collective::AllGather};
  if (auto why = unusable(output, "the output")) refuse(call, *why);
  if (auto why = unusable(input, "the input")) refuse(call, *why);
  // The core converts between its dtypes (the documentation's example gathers int64 into
  // float32); other dtypes (float8, uint32, complex) move as bytes and must match.
  const bool convertible =
      element_dtype(output) && element_dtype(input) && !output.is_complex() && !input.is_complex();
  const bool bytes = !convertible;
  if (bytes && output.scalar_type() != input.scalar_type()) {
    refuse(call, std::string("the input is ") + c10::toString(input.scalar_type()) +
                     " and the output " + c10::toString(output.scalar_type()) +
                     "; rdmacoll converts between bool, integer and real float dtypes only");
  }
  // Any output shape with the right element count, as NCCL takes it: both go as flat views.
  const Staged out = stage_output(output, bytes);
  const Staged in = stage_input(input, bytes);
  rdmacoll::Tensor o = out.view, i = in.view;
  return issue(
      call, {output}, {input}, {out.dense, in.dense},
      [&] { return rdmacoll::all_gather_into_tensor(o, i, group_, true); },
      [out] { copy_back(out); });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const Issue call{OpType::ALLGATHER, "rdmacoll:all_gather", Collective::AllGather};
  if (inputs.size() != 1 || outputs.size() != 1) {
    refuse(call, tensor_count("all_gather input", inputs.size(), "1 (and one output list)"));
  }
  const at::Tensor& input = inputs[0];
  std::vector<at::Tensor>& outs = outputs[0];
  if (auto why = unusable(input, "the input")) refuse(call, *why);
  if (static_cast<int>(outs.size()) != size_) {
    refuse(call, "the output list has " + std::to_string(outs.size()) +
                     " tensors, expected the group size " + std::to_string(size_));
  }
  for (size_t r = 0; r < outs.size(); ++r) {
    if (auto why = unusable(outs[r], "an output")) refuse(call, *why);
    if (outs[r].numel() != input.numel() || outs[r].scalar_type() != outs[0].scalar_type()) {
      refuse(call, "output " + std::to_string(r) + " has " + std::to_string(outs[r].numel()) +
                       " elements of " + c10::toString(outs[r].scalar_type()) +
                       "; every output needs the input's " + std::to_string(input.numel()) +
                       " elements and the first output's dtype");
    }
  }
  const bool convertible = element_dtype(outs[0]) && element_dtype(input) &&
                           !outs[0].is_complex() && !input.is_complex();
  if (!convertible && outs[0].scalar_type() != input.scalar_type()) {
    refuse(call, std::string("the input is ") + c10::toString(input.scalar_type()) +
                     " and the outputs " + c10::toString(outs[0].scalar_type()) +
                     "; rdmacoll converts between bool, integer and real float dtypes only");
  }
  // Into the caller's list itself when it is one block (`list(t.chunk(p))`; the input may be
  // its own slot); else one gather into a staging tensor, copied into each output (any
  // strides) when done.
  const Staged in = stage_input(input, !convertible);
  const std::optional<at::Tensor> block =
      block_in_place(outs, in.dense, static_cast<size_t>(rank_));
  at::Tensor staging =
      block ? *block : staging_.empty({size_, input.numel()}, outs[0].scalar_type());
  rdmacoll::Tensor o = flat_view(staging, !convertible), i = in.view;
  std::vector<at::Tensor> targets = outs;
  std::function<void()> copy_out;
  if (!block) {
    copy_out = [staging, targets] {
      for (size_t r = 0; r < targets.size(); ++r)
        targets[r].copy_(staging[static_cast<int64_t>(r)].view(targets[r].sizes()));
    };
  }
  return issue(
      call, outs, inputs, {staging, in.dense},
      [&] { return rdmacoll::all_gather_into_tensor(o, i, group_, true); }, std::move(copy_out));
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const Issue call{OpType::ALLGATHER_COALESCED, "rdmacoll:all_gather_coalesced",
                   Collective::AllGather};
  // outputs[r][k] receives rank r's input k.
  if (static_cast<int>(outputs.size()) != size_) {
    refuse(call, "the output has " + std::to_string(outputs.size()) +
                     " lists, expected one per rank of the group of " + std::to_string(size_));
  }
  for (const auto& t : inputs)
    if (auto why = unusable(t, "an input")) refuse(call, *why);
  for (size_t r = 0; r < outputs.size(); ++r) {
    if (outputs[r].size() != inputs.size()) {
      refuse(call, "output list " + std::to_string(r) + " has " +
                       std::to_string(outputs[r].size()) + " tensors for " +
                       std::to_string(inputs.size()) + " inputs");
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      const at::Tensor& t = outputs[r][k];
      if (auto why = unusable(t, "an output")) refuse(call, *why);
      if (t.scalar_type() != inputs[k].scalar_type() || t.numel() != inputs[k].numel()) {
        refuse(call, "output " + std::to_string(k) + " of list " + std::to_string(r) +
                         " must have input " + std::to_string(k) + "'s dtype and element count");
      }
    }
  }
  // Every input's bytes packed into one and gathered in one call, as for
  // all_gather_into_tensor_coalesced; rank r's block holds every input of rank r in order.
  const int64_t p = size_;
  const Packed in = pack_bytes(inputs);
  at::Tensor out = staging_.empty({p * in.bytes}, at::kByte);
  rdmacoll::Tensor o = flat_view(out, true), i = flat_view(in.tensor, true);
  std::vector<std::vector<at::Tensor>> targets = outputs;
  std::vector<at::Tensor> flat_outputs;
  for (const auto& list : outputs)
    flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  return issue(
      call, flat_outputs, inputs, {in.tensor, out},
      [&] { return rdmacoll::all_gather_into_tensor(o, i, group_, true); },
      [out, targets, p, total = in.bytes] {
        const at::Tensor blocks = out.view({p, total});
        for (int64_t r = 0; r < p; ++r) {
          int64_t offset = 0;
          for (const at::Tensor& t : targets[static_cast<size_t>(r)]) {
            const int64_t n = static_cast<int64_t>(t.nbytes());
            write_bytes(t, blocks[r].narrow(0, offset, n));
            offset += n;
          }
        }
      });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::barrier(const c10d::BarrierOptions&) {
  const Issue call{OpType::BARRIER, "rdmacoll:barrier", Collective::Barrier};
  return issue(call, {}, {}, {}, [&] { return rdmacoll::barrier(group_, true); });
}

#if RDMACOLL_TORCH2
c10::intrusive_ptr<c10d::Work> RdmacollBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const Issue call{OpType::COALESCED, "rdmacoll:all_gather_into_tensor_coalesced",
                   Collective::AllGather};
  if (outputs.size() != inputs.size()) {
    refuse(call, std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) +
                     " inputs");
  }
  if (inputs.size() == 1) return _allgather_base(outputs[0], inputs[0], opts);
  const int64_t p = size_;
  // Every input's bytes packed into one, gathered in one call; rank r's block of the gather
  // holds every input of rank r, one after the other.
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (auto why = unusable(inputs[k], "an input")) refuse(call, *why);
    if (auto why = unusable(outputs[k], "an output")) refuse(call, *why);
    if (inputs[k].scalar_type() != outputs[k].scalar_type() ||
        outputs[k].numel() != p * inputs[k].numel()) {
      refuse(call, "output " + std::to_string(k) + " must have input " + std::to_string(k) +
                       "'s dtype and the group size x its elements");
    }
  }
  const Packed in = pack_bytes(inputs);
  at::Tensor out = staging_.empty({p * in.bytes}, at::kByte);
  rdmacoll::Tensor o = flat_view(out, true), i = flat_view(in.tensor, true);
  std::vector<at::Tensor> targets = outputs;
  return issue(
      call, outputs, inputs, {in.tensor, out},
      [&] { return rdmacoll::all_gather_into_tensor(o, i, group_, true); },
      [out, targets, p, total = in.bytes] {
        const at::Tensor blocks = out.view({p, total});
        int64_t offset = 0;
        for (const auto& t : targets) {
          const int64_t n = static_cast<int64_t>(t.nbytes()) / p;
          write_bytes(t, blocks.narrow(1, offset, n));
          offset += n;
        }
      });
}

void RdmacollBackend::startCoalescing() {
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::endCoalescing() {
  coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.swap(coalesced_);
  if (works.size() == 1) return works.back();
  // One work for the batch, done when every call of it is: a group completes its collectives
  // in issue order, but sends and receives (batch_isend_irecv) end in any order.
  std::vector<rdmacoll::Work> cores;
  for (const auto& w : works)
    cores.push_back(static_cast<const WorkRdmacoll&>(*w).core());
  auto work =
      c10::make_intrusive<WorkRdmacoll>(rank_, OpType::COALESCED, "rdmacoll:coalesced",
                                        std::vector<at::Tensor>{}, std::vector<at::Tensor>{});
  work->arm(rdmacoll::when_all(cores), {});
  return work;
}
#endif

void leave_at_exit() {
  WithoutGil no_gil;
  std::lock_guard lock(world_mutex);
  world_owner = nullptr;
  rdmacoll::abort_process_group();
}

at::Tensor RdmacollBackend::empty_symmetric(const std::vector<int64_t>& sizes, at::ScalarType type,
                                            bool zeroed) {
  // Bytes of any dtype (the window is found by address, whatever the elements): the shape with
  // one more dimension of the element's size, so the core checks every size and the total.
  std::vector<int64_t> bytes(sizes);
  bytes.push_back(static_cast<int64_t>(c10::elementSize(type)));
  rdmacoll::Tensor t = zeroed
                           ? rdmacoll::empty(bytes, rdmacoll::DType::UInt8, group_)
                           : rdmacoll::empty_uninitialized(bytes, rdmacoll::DType::UInt8, group_);
  void* data = t.data();
  return at::from_blob(
      data, sizes, [t](void*) mutable { t = rdmacoll::Tensor(); },
      at::TensorOptions().dtype(type).device(at::kCPU));
}

#if RDMACOLL_TORCH2
at::Tensor RdmacollBackend::allocateTensor(long size, at::TensorOptions options) {
  if (options.has_device() && !options.device().is_cpu()) {
    throw std::invalid_argument("rdmacoll allocates CPU tensors only, not " +
                                options.device().str());
  }
  // Collective, like every call on the group; the GIL must not be held across it.
  WithoutGil no_gil;
  return empty_symmetric({static_cast<int64_t>(size)}, c10::typeMetaToScalarType(options.dtype()),
                         /*zeroed=*/false);
}
#endif

}  // namespace rdmacoll_torch
