#pragma once
// The torch.distributed-shaped entry points: one default process group per process, plus
// subgroups made with new_group().

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdmacoll/tensor.hpp"

namespace rdmacoll {

struct InitOptions {
  // "env://" (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, or the launcher's variables) or
  // "tcp://host:port" (rank and world_size must then be given).
  std::string init_method = "env://";
  int rank = -1;        // -1: from the environment
  int world_size = -1;  // -1: from the environment
  // How long any collective or rendezvous may wait. Unset: RDMACOLL_TIMEOUT_S, else 30 min.
  std::optional<std::chrono::milliseconds> timeout;
};

class GroupState;  // internal

// A handle on a group of ranks. Cheap to copy. The default-constructed Group means "the
// default (world) group" when passed to a collective.
class Group {
 public:
  Group() = default;
  explicit Group(std::shared_ptr<GroupState> state) : state_(std::move(state)) {}

  bool is_member() const;
  // This process's rank inside the group, or -1 when it is not a member.
  int rank() const;
  int size() const;
  // Global ranks of the members, in group rank order.
  const std::vector<int>& ranks() const;
  bool is_default() const { return state_ == nullptr; }
  GroupState* state() const { return state_.get(); }

 private:
  std::shared_ptr<GroupState> state_;
};

void init_process_group(const InitOptions& options = {});
bool is_initialized();
int get_rank(const Group& group = {});
int get_world_size(const Group& group = {});
// Collective over the world: every rank calls it with the same ranks, in the same order of calls.
Group new_group(const std::vector<int>& ranks,
                std::optional<std::chrono::milliseconds> timeout = std::nullopt);
void destroy_process_group();

// Name of the transport in use ("ucx", "verbs").
std::string transport_name();

// Gathers every member's `input` into `output` in group rank order. `output` is flat
// (size*n, ...) or stacked (size, n, ...); the input is converted to the output's dtype.
// Returns when this rank's output is complete.
void all_gather_into_tensor(Tensor& output, const Tensor& input, const Group& group = {});

// Gathers into a list: outputs[i] receives rank i's input.
void all_gather(std::vector<Tensor>& outputs, const Tensor& input, const Group& group = {});

// Reduction operators, as torch.distributed.ReduceOp. On bool tensors SUM and MAX are a logical
// or, PRODUCT and MIN a logical and. AVG needs a floating-point dtype; BAND, BOR and BXOR an
// integer or bool one.
enum class ReduceOp : uint8_t { Sum, Product, Min, Max, Avg, BAnd, BOr, BXor };
std::string reduce_op_name(ReduceOp op);  // "SUM", "PRODUCT", ...

// Reduces `tensor` across the group, in place: afterwards every member holds the elementwise
// reduction of every member's tensor. Each rank reduces in group rank order (16-bit floats in
// float), so every member gets bitwise the same result. Sizes, dtypes and `op` must agree.
void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum, const Group& group = {});

// Waits until every member has entered the barrier.
void barrier(const Group& group = {});

}  // namespace rdmacoll
