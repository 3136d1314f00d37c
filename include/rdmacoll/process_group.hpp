#pragma once
// The torch.distributed-shaped entry points: one default process group per process, plus
// subgroups made with new_group().

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdmacoll/export.hpp"
#include "rdmacoll/store.hpp"
#include "rdmacoll/tensor.hpp"
#include "rdmacoll/work.hpp"

namespace rdmacoll {

struct InitOptions {
  // "env://" (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, or the launcher's variables; with no
  // MASTER_ADDR under mpirun or srun --mpi=pmix, the launcher's PMIx server), "tcp://host:port"
  // (rank and world_size must then be given) or "pmix://".
  std::string init_method = "env://";
  int rank = -1;        // -1: from the environment
  int world_size = -1;  // -1: from the environment
  // How long any collective or rendezvous may wait. Unset: RDMACOLL_TIMEOUT_S, else 30 min.
  std::optional<std::chrono::milliseconds> timeout;
  // Rendezvous through this store instead of init_method (rank and world_size must be given),
  // as torch hands a backend its store. Every rank must pass the same store.
  std::shared_ptr<Store> store;
};

namespace detail {
class GroupState;  // the library's; opaque here
}  // namespace detail

// A handle on a group of ranks. Cheap to copy. The default-constructed Group means "the
// default (world) group" when passed to a collective.
class RDMACOLL_API Group {
 public:
  Group() = default;
  explicit Group(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}

  bool is_member() const;
  // This process's rank inside the group, or -1 when it is not a member.
  int rank() const;
  int size() const;
  // Global ranks of the members, in group rank order.
  const std::vector<int>& ranks() const;
  bool is_default() const { return state_ == nullptr; }

 private:
  friend detail::GroupState* state_of(const Group& group);
  std::shared_ptr<detail::GroupState> state_;
};

// Threads. init_process_group, destroy_process_group and abort_process_group take one lock: any
// thread may call them, one at a time (abort does not wait for an init or destroy under way on
// another thread, which then ends the world itself). Collectives may be issued from several
// threads at once (see the collectives below); groups are made in the same order on every rank,
// so one thread makes them. As in torch, no call may be in flight on a group while another
// thread destroys that group or the default world.
RDMACOLL_API void init_process_group(const InitOptions& options = {});
RDMACOLL_API bool is_initialized();
RDMACOLL_API int get_rank(const Group& group = {});
RDMACOLL_API int get_world_size(const Group& group = {});
// Collective over the world: every rank calls it with the same ranks, in the same order of calls.
RDMACOLL_API Group new_group(const std::vector<int>& ranks,
                             std::optional<std::chrono::milliseconds> timeout = std::nullopt);
// A group created by its members alone, as torch creates a backend's process group: every
// member calls it with the store the members share (keys under "rdmacoll/" in it are ours),
// its group rank and the group size; non-members do not call it. Needs init_process_group()
// first: all groups of a process share its one transport (connections, registrations).
RDMACOLL_API Group
new_member_group(const std::shared_ptr<Store>& store, int group_rank, int group_size,
                 std::optional<std::chrono::milliseconds> timeout = std::nullopt);
// A group of its members alone, with a world of its own (its own rendezvous over `store` and its
// own connections), for when this process has no default process group of rdmacoll: the torch
// backend makes one for new_group(backend="rdmacoll") under another default backend. Every
// member calls it with the store they share, its group rank and the group size.
RDMACOLL_API Group
new_standalone_group(const std::shared_ptr<Store>& store, int group_rank, int group_size,
                     std::optional<std::chrono::milliseconds> timeout = std::nullopt);
// The members of `group` but `excluded_ranks` (group ranks), as a new group over the same
// connections, in the same order: what a job does when ranks died and it carries on without
// them (torch's shrink_group, MPI's MPI_Comm_shrink). Only the survivors call it, each alone:
// no message and no store, so dead, stopped or unreachable ranks cannot hold it up. Survivors
// must shrink the same group with the same ranks excluded (in any order: the group of each
// survivor is found from them), as often as one another; what else each did before does not
// matter. ShrinkMode::Default leaves `group` as it is (a call on it may still wait for
// the excluded ranks; destroy it once done with it); ShrinkMode::AbortParent first fails the
// work `group` has running or queued (at once, not at its timeout: for ranks that hang rather
// than die) and leaves it unusable, as torch's SHRINK_ABORT. InvalidArgument: a rank out of
// range or twice, this rank excluded, or no rank left.
enum class ShrinkMode { Default, AbortParent };
RDMACOLL_API Group shrink_group(const Group& group, const std::vector<int>& excluded_ranks,
                                ShrinkMode mode = ShrinkMode::Default,
                                std::optional<std::chrono::milliseconds> timeout = std::nullopt);
// The group's timeout from now on: calls that have not begun to wait take it (torch's
// Backend::setTimeout, _set_pg_timeout). Any thread, while calls run.
RDMACOLL_API void set_timeout(std::chrono::milliseconds timeout, const Group& group = {});
// Frees a group made by new_group() or new_member_group() now: its outstanding work finishes,
// its shared memory is freed, and `group` becomes the default group. Other copies of the
// handle raise InvalidArgument when used. Dropping the last handle frees a group too. Each
// member calls it, after its last collective on the group.
RDMACOLL_API void destroy_group(Group& group);
RDMACOLL_API void destroy_process_group();

// Symmetric memory: a zeroed tensor that every member of the group allocates together, each
// member's memory mapped by every member on one host. An all_gather_into_tensor whose output
// is such a tensor on every member (the same tensor, at the same place) stores each chunk
// straight into every member's output: one copy, no cross-memory attach, no registration.
// Collective: every member calls it with the same sizes and dtype, in the same order as its
// other calls on the group. Where the members cannot map each other's memory (several hosts,
// no ptrace permission), the tensor is ordinary memory and collectives take their usual path;
// across hosts over verbs it is registered with the NIC once, when made, so no call on it
// registers it (a registration pins every page).
RDMACOLL_API Tensor empty(std::vector<int64_t> sizes, DType dtype, const Group& group = {});
// As empty(), but its bytes are unspecified, as torch.empty's: a tensor the members dropped is
// reused without being cleared (allocators such as FSDP2's, which overwrite it anyway). Each
// group keeps a few dropped tensors' memory mapped for reuse until the group is destroyed.
RDMACOLL_API Tensor empty_uninitialized(std::vector<int64_t> sizes, DType dtype,
                                        const Group& group = {});

// Name of the transport in use ("ucx", "verbs").
RDMACOLL_API std::string transport_name();

// Every collective runs on the calling thread and returns once this rank's part is done, or,
// with async_op = true, is queued and returns a Work to wait on (the tensors must stay alive
// until then, as in torch). Collectives may be called from several threads at once: on
// different groups they run concurrently; on one group, one at a time in the order issued.
// Every member must issue the same collectives on a group in the same order.

// Gathers every member's `input` into `output` in group rank order. `output` is flat
// (size*n, ...) or stacked (size, n, ...); the input is converted to the output's dtype.
RDMACOLL_API Work all_gather_into_tensor(Tensor& output, const Tensor& input,
                                         const Group& group = {}, bool async_op = false);

// Gathers into a list: outputs[i] receives rank i's input.
RDMACOLL_API Work all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                             const Group& group = {}, bool async_op = false);

// Reduces `tensor` across the group, in place: afterwards every member holds the elementwise
// reduction of every member's tensor. Each rank reduces in group rank order (16-bit floats in
// float), so every member gets bitwise the same result. Sizes, dtypes and `op` must agree.
RDMACOLL_API Work all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum, const Group& group = {},
                             bool async_op = false);

// Reduces `input` (flat (size*n, ...) or stacked (size, n, ...)) across the group and leaves
// piece `rank` of the result, n elements, in `output`, as torch's reduce_scatter_tensor. Input
// and output share a dtype; `output` may be this rank's piece of `input`.
RDMACOLL_API Work reduce_scatter_tensor(Tensor& output, const Tensor& input,
                                        ReduceOp op = ReduceOp::Sum, const Group& group = {},
                                        bool async_op = false);

// Copies `tensor` of global rank `src` (a member of the group, as in torch) into every
// member's `tensor`. Sizes and dtypes must agree.
RDMACOLL_API Work broadcast(Tensor& tensor, int src, const Group& group = {},
                            bool async_op = false);

// Waits until every member has entered the barrier.
RDMACOLL_API Work barrier(const Group& group = {}, bool async_op = false);

// Gathers every member's `input` into `output` on global rank `dst` (a member), in group rank
// order; `output` is flat (size*n, ...) or stacked (size, n, ...) with the input's dtype, and is
// read on `dst` only (pass nullptr elsewhere). Sizes and dtypes must agree.
RDMACOLL_API Work gather(Tensor* output, const Tensor& input, int dst, const Group& group = {},
                         bool async_op = false);

// Copies piece j of `input` on global rank `src` (flat (size*n, ...) or stacked (size, n, ...),
// read on `src` only: nullptr elsewhere) into `output` (n elements) of group rank j.
RDMACOLL_API Work scatter(Tensor& output, const Tensor* input, int src, const Group& group = {},
                          bool async_op = false);

// Reduces `tensor` across the group into `tensor` on global rank `dst`, folded in group rank
// order as all_reduce folds; the other members' tensors are only read.
RDMACOLL_API Work reduce(Tensor& tensor, int dst, ReduceOp op = ReduceOp::Sum,
                         const Group& group = {}, bool async_op = false);

// Splits `input` along dim 0 into input_split_sizes[j] rows for group rank j, and fills
// `output` with the rows every member sends here, in group rank order (output_split_sizes[i]
// rows from rank i), as torch's all_to_all_single. Empty split sizes mean equal splits (dim 0
// divisible by the group size). Rows have the same element count on both sides; input and
// output share a dtype and do not overlap. What rank i sends rank j must be what rank j
// expects from rank i: a mismatch raises on every rank.
RDMACOLL_API Work all_to_all_single(Tensor& output, const Tensor& input,
                                    const std::vector<int64_t>& output_split_sizes = {},
                                    const std::vector<int64_t>& input_split_sizes = {},
                                    const Group& group = {}, bool async_op = false);

// inputs[j] goes to group rank j, which receives it in its outputs[i] from rank i; every
// tensor shares a dtype, and inputs[j] here has outputs[i]'s element count there.
RDMACOLL_API Work all_to_all(std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                             const Group& group = {}, bool async_op = false);

// Point-to-point. send() of `tensor`'s bytes to global rank `dst` is matched by the recv() on
// `dst` of the same group and tag (0 to 2^24 - 1), in the order each side issued them, as MPI
// matches; sizes must agree. Only the two ranks take part. With async_op the call returns at
// once (isend, irecv) and the tensor must stay untouched until the work completes; later calls
// on the group do not wait for it. A peer that never answers raises Timeout after the group's
// timeout, a dead one PeerFailure.
inline constexpr int kAnySource = -1;
RDMACOLL_API Work send(const Tensor& tensor, int dst, const Group& group = {}, int tag = 0,
                       bool async_op = false);
// `src` kAnySource: from whichever other member sends with `tag` first (Work::source_rank()).
RDMACOLL_API Work recv(Tensor& tensor, int src, const Group& group = {}, int tag = 0,
                       bool async_op = false);

// One operation of a batch: a send of `tensor` to `peer`, or a recv into it from `peer`.
struct P2POp {
  enum class Kind : uint8_t { Send, Recv };
  Kind kind = Kind::Send;
  Tensor tensor;
  int peer = 0;
  Group group;
  int tag = 0;
};
// Starts every operation at once (torch's batch_isend_irecv); one work per operation.
RDMACOLL_API std::vector<Work> batch_isend_irecv(const std::vector<P2POp>& ops);

// The collectives, for calls that name one (reject).
enum class Collective : uint8_t {
  AllGather,
  AllReduce,
  ReduceScatter,
  Broadcast,
  Barrier,
  Gather,
  Scatter,
  Reduce,
  AllToAll
};

// For a layer above rdmacoll (the torch backend) whose own checks refuse this rank's arguments
// to a collective: takes this rank's part in the group's next `collective` without data, so
// that every member raises InvalidArgument ("rank R rejected its arguments: why", as when
// rdmacoll's own checks refuse), nothing is written and the group stays in step. This rank's
// Work raises InvalidArgument(why).
RDMACOLL_API Work reject(Collective collective, const std::string& why, const Group& group = {},
                         bool async_op = false);

// Leaves at once, for a process that is exiting without destroy_process_group (an uncaught
// exception, a signal): outstanding and queued work fails within a fraction of a second,
// connections close so that peers raise PeerFailure, and nothing waits for the other ranks.
// Afterwards the process may initialize again; the memory the transport shares with peers
// stays mapped until the process ends (a peer may be mapping it). A no-op when not initialized.
RDMACOLL_API void abort_process_group();

}  // namespace rdmacoll
