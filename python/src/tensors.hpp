#pragma once
// torch tensors as the core sees them: dense CPU memory with a core dtype. Tensors that are not
// contiguous (strided views, channels_last) are staged through a contiguous copy, as gloo does;
// complex tensors travel as float pairs; dtypes the core has no arithmetic for (float8,
// uint16/32/64, ...) move as bytes in the collectives that only move data.

#include <ATen/ATen.h>

#include <rdmacoll/tensor.hpp>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace rdmacoll_torch {

// Why `t` cannot take part in a collective at all (a CUDA or sparse tensor), or nullopt.
std::optional<std::string> unusable(const at::Tensor& t, const char* what);

// The core dtype of `t`'s elements (of the float pairs, for complex), or nullopt where the core
// has none: then only collectives that move bytes can take it.
std::optional<rdmacoll::DType> element_dtype(const at::Tensor& t);

// A tensor staged for the core: `dense` is contiguous (the caller's tensor or a copy of it) and
// `view` is the core's 1-D view of it, in its element dtype or as bytes.
struct Staged {
  at::Tensor user;
  at::Tensor dense;
  rdmacoll::Tensor view;
  bool copied() const { return !dense.is_same(user); }
};

// An input: copied when not contiguous. An output: a contiguous buffer when the caller's is not,
// written back by copy_back once the collective is done (in place: both).
Staged stage_input(const at::Tensor& t, bool bytes);
Staged stage_output(const at::Tensor& t, bool bytes, bool in_place = false);
void copy_back(const Staged& s);

// The core view of a contiguous tensor, flattened; as bytes when `bytes`.
rdmacoll::Tensor flat_view(const at::Tensor& dense, bool bytes);

// Several tensors' bytes one after the other in one contiguous byte tensor, for the coalesced
// calls that move them in one collective.
struct Packed {
  at::Tensor tensor;
  int64_t bytes = 0;
};
Packed pack_bytes(const std::vector<at::Tensor>& tensors);

// The one flat tensor that `list` is when its tensors are contiguous, alike in dtype and size,
// and lie one after the other in one storage, in order (`list(t.view(p, n))`, `t.chunk(p)`),
// and `other` (contiguous) is either apart from it or exactly list[own]: gather and scatter then
// use the caller's memory itself instead of a staging copy. Else nullopt.
std::optional<at::Tensor> block_in_place(const std::vector<at::Tensor>& list,
                                         const at::Tensor& other, size_t own);

// Staging buffers kept across calls: a fresh buffer of many MiB costs its page faults and the
// kernel's zeroing on every call (most of a 16 MiB list all_gather's time). A buffer is handed
// out again only once nothing else holds its storage: the call that used it, its copy-out and
// any view of it a caller kept are gone, so reuse can never hand out memory still in use.
class StagingPool {
 public:
  static constexpr size_t kMaxSpare = 4;
  static constexpr int64_t kMaxSpareBytes = int64_t{256} << 20;  // larger ones are not kept

  // A contiguous CPU tensor of `sizes` and `dtype`, its contents undefined.
  at::Tensor empty(at::IntArrayRef sizes, at::ScalarType dtype);

 private:
  std::mutex mu_;
  std::vector<at::Tensor> spare_;  // byte tensors; free when their storage is held only here
};

// Writes `bytes` (a byte tensor of t's size, in any shape t's bytes can be viewed as) into `t`,
// through a contiguous copy when `t` is strided.
void write_bytes(const at::Tensor& t, const at::Tensor& bytes);

// "what: 3 tensors, expected 1", for list arguments of the wrong length.
inline std::string tensor_count(const char* what, size_t got, const char* expected) {
  return std::string(what) + ": " + std::to_string(got) + " tensors, expected " + expected;
}

}  // namespace rdmacoll_torch
