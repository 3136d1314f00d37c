#include "tensors.hpp"

#include <c10/util/accumulate.h>

namespace rdmacoll_torch {

std::optional<std::string> unusable(const at::Tensor& t, const char* what) {
  if (!t.defined()) return std::string(what) + " is an undefined tensor";
  if (!t.device().is_cpu()) {
    return std::string(what) + " is on " + t.device().str() +
           "; rdmacoll moves CPU tensors: for GPU tensors initialize with "
           "backend=\"cpu:rdmacoll,cuda:nccl\" (NCCL for CUDA, rdmacoll for CPU)";
  }
  if (t.layout() != at::kStrided) {
    return std::string(what) + " has layout " + c10::str(t.layout()) +
           "; rdmacoll takes dense (strided) tensors, and sparse ones in all_reduce only";
  }
  return std::nullopt;
}

std::optional<rdmacoll::DType> element_dtype(const at::Tensor& t) {
  using rdmacoll::DType;
  const at::ScalarType type =
      t.is_complex() ? c10::toRealValueType(t.scalar_type()) : t.scalar_type();
  switch (type) {
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
      return std::nullopt;
  }
}

rdmacoll::Tensor flat_view(const at::Tensor& dense, bool bytes) {
  if (bytes || !element_dtype(dense)) {
    return rdmacoll::Tensor::view(dense.data_ptr(), rdmacoll::DType::UInt8,
                                  {static_cast<int64_t>(dense.nbytes())});
  }
  const int64_t n = dense.is_complex() ? 2 * dense.numel() : dense.numel();
  return rdmacoll::Tensor::view(dense.data_ptr(), *element_dtype(dense), {n});
}

Packed pack_bytes(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> parts;
  Packed p;
  for (const auto& t : tensors) {
    parts.push_back(t.contiguous().view(-1).view(at::kByte));
    p.bytes += static_cast<int64_t>(t.nbytes());
  }
  p.tensor = parts.empty() ? at::empty({0}, at::kByte) : at::cat(parts);
  return p;
}

at::Tensor StagingPool::empty(at::IntArrayRef sizes, at::ScalarType dtype) {
  const int64_t bytes =
      c10::multiply_integers(sizes) * static_cast<int64_t>(c10::elementSize(dtype));
  if (bytes == 0 || bytes > kMaxSpareBytes) return at::empty(sizes, at::TensorOptions(dtype));
  const auto shaped = [&](const at::Tensor& b) {
    return b.narrow(0, 0, bytes).view(dtype).view(sizes);
  };
  std::lock_guard lock(mu_);
  // The smallest spare no tensor still uses that holds at least `at_least` bytes.
  const auto smallest_free = [&](int64_t at_least) -> at::Tensor* {
    at::Tensor* best = nullptr;
    for (at::Tensor& b : spare_) {
      if (b.storage().use_count() == 1 && b.numel() >= at_least &&
          (!best || b.numel() < best->numel()))
        best = &b;
    }
    return best;
  };
  if (at::Tensor* best = smallest_free(bytes)) return shaped(*best);
  // A new one; it replaces the smallest free spare when all places are taken.
  at::Tensor fresh = at::empty({bytes}, at::TensorOptions(at::kByte));
  if (spare_.size() < kMaxSpare) {
    spare_.push_back(fresh);
  } else if (at::Tensor* smallest = smallest_free(0)) {
    *smallest = fresh;
  }
  return shaped(fresh);
}

void write_bytes(const at::Tensor& t, const at::Tensor& bytes) {
  if (t.is_contiguous()) {
    t.view(-1).view(at::kByte).view(bytes.sizes()).copy_(bytes);
    return;
  }
  at::Tensor dense = at::empty(t.sizes(), t.options());
  dense.view(-1).view(at::kByte).view(bytes.sizes()).copy_(bytes);
  t.copy_(dense);
}

// is_contiguous() means row-major (a channels_last tensor is staged), as the flat view needs.
Staged stage_input(const at::Tensor& t, bool bytes) {
  Staged s;
  s.user = t;
  s.dense = t.is_contiguous() ? t : t.contiguous();
  s.view = flat_view(s.dense, bytes);
  return s;
}

Staged stage_output(const at::Tensor& t, bool bytes, bool in_place) {
  Staged s;
  s.user = t;
  if (t.is_contiguous()) {
    s.dense = t;
  } else {
    s.dense = in_place ? t.contiguous() : at::empty(t.sizes(), t.options());
  }
  s.view = flat_view(s.dense, bytes);
  return s;
}

namespace {

std::optional<at::Tensor> adjacent_block(const std::vector<at::Tensor>& list) {
  if (list.empty()) return std::nullopt;
  const at::Tensor& first = list[0];
  const auto bytes = static_cast<int64_t>(first.nbytes());
  if (bytes == 0 || !first.has_storage()) return std::nullopt;
  const auto* base = static_cast<const uint8_t*>(first.data_ptr());
  for (size_t r = 0; r < list.size(); ++r) {
    const at::Tensor& t = list[r];
    if (!t.has_storage() || !t.is_contiguous() || t.scalar_type() != first.scalar_type() ||
        t.numel() != first.numel() || !t.storage().is_alias_of(first.storage()) ||
        static_cast<const uint8_t*>(t.data_ptr()) != base + static_cast<int64_t>(r) * bytes) {
      return std::nullopt;
    }
  }
  const int64_t n = first.numel() * static_cast<int64_t>(list.size());
  if ((first.storage_offset() + n) * static_cast<int64_t>(first.element_size()) >
      static_cast<int64_t>(first.storage().nbytes())) {
    return std::nullopt;
  }
  return first.new_empty({0}).set_(first.storage(), first.storage_offset(), {n}, {1});
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto* pa = static_cast<const uint8_t*>(a.data_ptr());
  const auto* pb = static_cast<const uint8_t*>(b.data_ptr());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

std::optional<at::Tensor> block_in_place(const std::vector<at::Tensor>& list,
                                         const at::Tensor& other, size_t own) {
  std::optional<at::Tensor> block = adjacent_block(list);
  if (block && overlaps(*block, other) && other.data_ptr() != list[own].data_ptr()) {
    return std::nullopt;
  }
  return block;
}

void copy_back(const Staged& s) {
  if (s.copied()) s.user.copy_(s.dense);
}

}  // namespace rdmacoll_torch
