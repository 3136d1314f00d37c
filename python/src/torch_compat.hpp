#pragma once
// The one file that knows which torch it is built against (as intel/torch-ccl does): torch
// 1.13's c10d backends subclass c10d::ProcessGroup, torch 2.x's subclass c10d::Backend, with
// the same virtual signatures. Everything torch-version-specific the backend needs is here.

#include <torch/version.h>

#include <exception>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define RDMACOLL_TORCH2 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define RDMACOLL_TORCH2 0
#endif

// torch.distributed.shrink_group's Backend::shrink (torch 2.10 and later): the build defines
// RDMACOLL_TORCH_SHRINK where torch's headers declare it.
#ifndef RDMACOLL_TORCH_SHRINK
#define RDMACOLL_TORCH_SHRINK 0
#endif
// Backend::setTimeout (torch.distributed.set_timeout), likewise.
#ifndef RDMACOLL_TORCH_SET_TIMEOUT
#define RDMACOLL_TORCH_SET_TIMEOUT 0
#endif

namespace rdmacoll_torch::compat {

#if RDMACOLL_TORCH2
using Base = c10d::Backend;
// The Python type of Base, which must be imported before a class can name it as its base.
inline constexpr const char* kPyBaseModule = "torch._C._distributed_c10d";
#else
using Base = c10d::ProcessGroup;
inline constexpr const char* kPyBaseModule = "torch.distributed";
#endif

// A communication failure (a peer died, a timeout, the transport): torch.distributed's
// DistBackendError where torch has it (2.1+), else RuntimeError.
inline std::exception_ptr communication_error(const std::string& message) {
#if RDMACOLL_TORCH2
  return std::make_exception_ptr(
      c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
#else
  return std::make_exception_ptr(
      c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
#endif
}

// The rendezvous through torch's store failed (a rank never came, the store went away):
// torch.distributed.DistStoreError where torch has it, else RuntimeError.
inline std::exception_ptr store_error(const std::string& message) {
#if RDMACOLL_TORCH2
  return std::make_exception_ptr(
      c10::DistStoreError(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
#else
  return std::make_exception_ptr(
      c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
#endif
}

// A mistake in the arguments: RuntimeError, as torch's own backends raise.
inline std::exception_ptr argument_error(const std::string& message) {
  return std::make_exception_ptr(
      c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
}

// PREMUL_SUM's factor (torch.distributed._make_nccl_premul_sum): a double or a 1-element tensor.
inline std::optional<at::Tensor> premul_factor(const c10d::ReduceOp& op) {
  if (!op.supplement_) return std::nullopt;
#if RDMACOLL_TORCH2
  const auto* s = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
  if (!s) return std::nullopt;
  if (s->tensor_factor.defined()) return s->tensor_factor;
  return at::scalar_tensor(s->double_factor, at::kDouble);
#else
  const auto* s = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (!s) return std::nullopt;
  if (!s->tensor_factors.empty()) return s->tensor_factors.front();
  return at::scalar_tensor(s->double_factor, at::kDouble);
#endif
}

}  // namespace rdmacoll_torch::compat
