// rdmacoll as a torch.distributed backend on torch 1.13: a c10d::ProcessGroup whose
// collectives are rdmacoll's, issued as async work on the public C++ API. A thin layer: tensors
// become rdmacoll::Tensor views, torch's store becomes an rdmacoll::Store, each rdmacoll::Work
// becomes a c10d::Work with a future (DDP needs one).
//
// Groups: the first process group torch creates in a process (the default group) initializes
// rdmacoll over torch's store; every later one (new_group, created by its members only) is an
// rdmacoll member group over that group's store, sharing the process's one transport.

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <rdmacoll/rdmacoll.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace rdmacoll_torch {

namespace {

using rdmacoll::DType;

// rdmacoll expects its own errors: a store that went away (rank 0, which hosts torch's
// TCPStore, exited) is a PeerFailure.
template <typename F>
auto store_guarded(F&& f) {
  try {
    return f();
  } catch (const rdmacoll::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw rdmacoll::PeerFailure(std::string("torch's store failed: ") + e.what());
  }
}

// torch's Store as rdmacoll's. get() never lets a wait on torch's store time out: torch
// 1.13's TCPStore leaves a timed-out wait pending on its server, whose answer arrives when the
// key is set and is read as the reply to the connection's next command (measured: a 100 ms
// wait that timed out, then the key set, then num_keys() returned 512 and get() timed out;
// in CI a rank's abort check read it as "abort posted" and init failed with "Stop_waiting
// response is expected"). rdmacoll waits in short slices, so get() polls check() instead, at
// an interval that grows with the time already waited: an eighth of it, 100 us to 20 ms.
class TorchStore final : public rdmacoll::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  using rdmacoll::Store::set;
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    store_guarded([&] { store_->set(key, value); });
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    while (!check(key)) {
      const auto waited = Clock::now() - start;
      if (waited >= timeout) {
        throw rdmacoll::Timeout("timed out after " + std::to_string(timeout.count()) +
                                " ms waiting for key '" + key + "' in torch's store");
      }
      std::this_thread::sleep_for(std::clamp<Clock::duration>(
          waited / 8, std::chrono::microseconds(100), std::chrono::milliseconds(20)));
    }
    return store_guarded([&] { return store_->get(key); });
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return store_guarded([&] { return store_->add(key, delta); });
  }
  bool check(const std::string& key) override {
    return store_guarded([&] { return store_->check({key}); });
  }
  std::string describe() const override { return "torch store"; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

DType to_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kBool:
      return DType::Bool;
    case at::kByte:
      return DType::UInt8;
    case at::kChar:
      return DType::Int8;
    case at::kShort:
      return DType::Int16;
    case at::kInt:
      return DType::Int32;
    case at::kLong:
      return DType::Int64;
    case at::kHalf:
      return DType::Float16;
    case at::kBFloat16:
      return DType::BFloat16;
    case at::kFloat:
      return DType::Float32;
    case at::kDouble:
      return DType::Float64;
    default:
      TORCH_CHECK(false, "rdmacoll: dtype ", t.scalar_type(), " is not supported");
  }
}

// Complex tensors travel as pairs of floats, as torch's other backends send them.
at::Tensor as_real(const at::Tensor& t) {
  return t.is_complex() ? at::view_as_real(t) : t;
}

rdmacoll::Tensor view(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "rdmacoll: ", what, " must be a CPU tensor, got ", t.device());
  TORCH_CHECK(t.is_contiguous(), "rdmacoll: ", what, " must be contiguous");
  const at::Tensor r = as_real(t);
  std::vector<int64_t> sizes(r.sizes().begin(), r.sizes().end());
  return rdmacoll::Tensor::view(r.data_ptr(), to_dtype(r), std::move(sizes));
}

rdmacoll::ReduceOp to_op(const c10d::ReduceOp& op, const at::Tensor& t) {
  const bool complex = t.is_complex();
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return rdmacoll::ReduceOp::Sum;
    case c10d::ReduceOp::AVG:
      return rdmacoll::ReduceOp::Avg;
    case c10d::ReduceOp::PRODUCT:
      TORCH_CHECK(!complex, "rdmacoll: PRODUCT of complex tensors is not supported");
      return rdmacoll::ReduceOp::Product;
    case c10d::ReduceOp::MIN:
      TORCH_CHECK(!complex, "rdmacoll: MIN of complex tensors is not defined");
      return rdmacoll::ReduceOp::Min;
    case c10d::ReduceOp::MAX:
      TORCH_CHECK(!complex, "rdmacoll: MAX of complex tensors is not defined");
      return rdmacoll::ReduceOp::Max;
    case c10d::ReduceOp::BAND:
      return rdmacoll::ReduceOp::BAnd;
    case c10d::ReduceOp::BOR:
      return rdmacoll::ReduceOp::BOr;
    case c10d::ReduceOp::BXOR:
      return rdmacoll::ReduceOp::BXor;
    default:
      TORCH_CHECK(false, "rdmacoll: reduce op ", static_cast<int>(op.op_), " is not supported");
  }
}

// A c10d::Work over an rdmacoll::Work. It keeps the tensors alive until the collective is done
// and completes a future with the outputs (DDP's reducer chains on it).
class WorkRdmacoll final : public c10d::Work {
 public:
  WorkRdmacoll(int rank, c10d::OpType type, rdmacoll::Work work, std::vector<at::Tensor> outputs,
               std::vector<at::Tensor> keep_alive = {})
      : c10d::Work(rank, type),
        work_(std::move(work)),
        outputs_(std::move(outputs)),
        keep_alive_(std::move(keep_alive)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  // Called once, right after construction (the callback may run at once).
  void arm(const std::function<void()>& after = {}) {
    auto future = future_;
    auto outputs = outputs_;
    work_.on_completion([future, outputs, after](std::exception_ptr error) {
      if (!error && after) {
        try {
          after();
        } catch (...) {
          error = std::current_exception();
        }
      }
      if (error) {
        future->setError(error);
      } else {
        future->markCompleted(c10::IValue(outputs));
      }
    });
  }

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) {
      work_.wait();
    } else {
      work_.wait(timeout);
    }
    future_->wait();  // the callback that completes it may still be running
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  rdmacoll::Work work_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupRdmacoll;
// The process group that initialized rdmacoll's world, if it still owns it: a later default
// group (init_process_group after destroy_process_group) replaces the world even when the old
// group object is still referenced (by a DDP module, say), and only the owner destroys it.
ProcessGroupRdmacoll* world_owner = nullptr;
std::mutex world_mutex;

class ProcessGroupRdmacoll final : public c10d::ProcessGroup {
 public:
  ProcessGroupRdmacoll(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, bool is_default)
      : c10d::ProcessGroup(rank, size) {
    auto ours = std::make_shared<TorchStore>(store);
    std::lock_guard lock(world_mutex);
    try {
      if (is_default) {
        if (rdmacoll::is_initialized()) rdmacoll::destroy_process_group();
        rdmacoll::InitOptions o;
        o.store = ours;
        o.rank = rank;
        o.world_size = size;
        o.timeout = timeout;
        rdmacoll::init_process_group(o);
        world_owner = this;
        group_ = rdmacoll::Group();
      } else {
        group_ = rdmacoll::new_member_group(ours, rank, size, timeout);
      }
    } catch (const rdmacoll::Error& e) {
      TORCH_CHECK(false, "rdmacoll: ", e.what());
    }
    init();
  }

  ~ProcessGroupRdmacoll() override {
    std::lock_guard lock(world_mutex);
    if (world_owner != this) return;
    world_owner = nullptr;
    // Python frees the group holding the GIL, and destroy waits for the groups' workers, which
    // may need it to free the tensors of their last work: release it meanwhile (a deadlock
    // otherwise, seen when a script's last collective was async).
    std::optional<py::gil_scoped_release> no_gil;
    if (PyGILState_Check()) no_gil.emplace();
    try {
      rdmacoll::destroy_process_group();
    } catch (const std::exception&) {
    }
  }

  const std::string getBackendName() const override { return "rdmacoll"; }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    rdmacoll::Tensor o = view(out, "output"), i = view(in, "input");
    return issue(c10d::OpType::_ALLGATHER_BASE, {out}, {in},
                 [&] { return rdmacoll::all_gather_into_tensor(o, i, group_, true); });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "rdmacoll: one input tensor per rank (and one output list), got ", inputs.size(),
                " inputs");
    std::vector<rdmacoll::Tensor> outs;
    for (const auto& t : outputs[0])
      outs.push_back(view(t, "each output"));
    rdmacoll::Tensor i = view(inputs[0], "input");
    return issue(c10d::OpType::ALLGATHER, outputs[0], inputs,
                 [&] { return rdmacoll::all_gather(outs, i, group_, true); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "rdmacoll: one tensor per rank, got ", tensors.size());
    const rdmacoll::ReduceOp op = to_op(opts.reduceOp, tensors[0]);
    rdmacoll::Tensor t = view(tensors[0], "tensor");
    return issue(c10d::OpType::ALLREDUCE, tensors, {},
                 [&] { return rdmacoll::all_reduce(t, op, group_, true); });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "rdmacoll: one tensor per rank, got ", tensors.size());
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "rdmacoll: broadcast root ",
                opts.rootRank, " is not a rank of this group of ", size_);
    rdmacoll::Tensor t = view(tensors[0], "tensor");
    const int src = global_rank(static_cast<int>(opts.rootRank));
    return issue(c10d::OpType::BROADCAST, tensors, {},
                 [&] { return rdmacoll::broadcast(t, src, group_, true); });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& opts) override {
    const rdmacoll::ReduceOp op = to_op(opts.reduceOp, in);
    rdmacoll::Tensor o = view(out, "output"), i = view(in, "input");
    return issue(c10d::OpType::_REDUCE_SCATTER_BASE, {out}, {in},
                 [&] { return rdmacoll::reduce_scatter_tensor(o, i, op, group_, true); });
  }

  // The list form: the inputs are packed into one tensor first (one collective).
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
                "rdmacoll: one output tensor per rank, got ", outputs.size());
    TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_, "rdmacoll: the input list has ",
                inputs[0].size(), " tensors, expected the group size ", size_);
    for (const auto& t : inputs[0]) {
      TORCH_CHECK(t.sizes() == outputs[0].sizes() && t.scalar_type() == outputs[0].scalar_type(),
                  "rdmacoll: every input must match the output's shape and dtype");
    }
    at::Tensor packed = at::stack(inputs[0]).contiguous();
    return _reduce_scatter_base(outputs[0], packed, opts);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return issue(c10d::OpType::BARRIER, {}, {}, [&] { return rdmacoll::barrier(group_, true); });
  }

 private:
  int global_rank(int group_rank) const {
    return group_.is_default() ? group_rank : group_.ranks().at(group_rank);
  }

  template <typename F>
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                       std::vector<at::Tensor> inputs, F&& start) {
    rdmacoll::Work w;
    try {
      w = start();
    } catch (const rdmacoll::Error& e) {
      TORCH_CHECK(false, "rdmacoll: ", e.what());
    }
    auto work = c10::make_intrusive<WorkRdmacoll>(rank_, type, std::move(w), std::move(outputs),
                                                  std::move(inputs));
    work->arm();
    return work;
  }

  rdmacoll::Group group_;
};

}  // namespace

}  // namespace rdmacoll_torch

PYBIND11_MODULE(_C, m) {
  // torch's c10d types must be registered before a class names one as its base.
  py::module_ dist = py::module_::import("torch.distributed");
  using rdmacoll_torch::ProcessGroupRdmacoll;
  py::class_<ProcessGroupRdmacoll, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupRdmacoll>>(
      m, "ProcessGroupRdmacoll")
      // torch 1.13 calls the backend's creator as (store, group rank, group size, timeout).
      // rdmacoll_torch's creator passes torch 1.13's (store, group rank, group size, timeout)
      // and whether this is the default group (no global ranks listed).
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, bool is_default) {
             return c10::make_intrusive<ProcessGroupRdmacoll>(store, rank, size, timeout,
                                                              is_default);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("is_default"), py::call_guard<py::gil_scoped_release>());
  // For tests: the store adapter's get(), against a real torch store.
  m.def(
      "_store_get",
      [](const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
         std::chrono::milliseconds timeout) {
        std::vector<uint8_t> v;
        {
          py::gil_scoped_release release;
          v = rdmacoll_torch::TorchStore(store).get(key, timeout);
        }
        return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
      },
      py::arg("store"), py::arg("key"), py::arg("timeout"));
  m.def("transport_name", [] { return rdmacoll::transport_name(); });
  m.def("is_initialized", [] { return rdmacoll::is_initialized(); });
  // At interpreter exit: a world whose group object was never freed is destroyed while torch
  // (and its store) still exist.
  m.def(
      "shutdown",
      [] {
        std::lock_guard lock(rdmacoll_torch::world_mutex);
        rdmacoll_torch::world_owner = nullptr;
        if (rdmacoll::is_initialized()) rdmacoll::destroy_process_group();
      },
      py::call_guard<py::gil_scoped_release>());
}
