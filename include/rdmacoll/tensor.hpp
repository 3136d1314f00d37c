#pragma once
// Tensor: a contiguous n-d array described by (data, dtype, sizes). It is either a non-owning
// view over caller memory (Tensor::view) or owns its storage (zeros, empty, tensor).
// Copying a Tensor shares storage, like a torch tensor handle.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "rdmacoll/export.hpp"
#include "rdmacoll/types.hpp"

namespace rdmacoll {

class RDMACOLL_API Tensor {
 public:
  Tensor() = default;

  // Non-owning view of `data`; the caller keeps it alive and contiguous.
  static Tensor view(void* data, DType dtype, std::vector<int64_t> sizes);

  // Owning, zero-filled.
  static Tensor zeros(std::vector<int64_t> sizes, DType dtype = DType::Float32);

  // A view of `data` that keeps `owner` alive as long as any copy of the tensor lives (memory
  // the library or the caller allocated otherwise, e.g. rdmacoll::empty's).
  static Tensor owning(std::shared_ptr<void> owner, void* data, DType dtype,
                       std::vector<int64_t> sizes);

  // Owning, from values (converted to dtype as torch.tensor(values, dtype=...) would).
  static Tensor from_values(std::initializer_list<double> values, DType dtype);

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  // Element i of the flattened tensor, converted to double (for tests and printing).
  double item(int64_t i) const;
  // Store v (converted to this tensor's dtype) at flat index i.
  void set(int64_t i, double v);

  // View of row i of the first dimension.
  Tensor select(int64_t i) const;

  std::string to_string() const;

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::Float32;
  std::vector<int64_t> sizes_;
};

inline Tensor zeros(std::vector<int64_t> sizes, DType dtype = DType::Float32) {
  return Tensor::zeros(std::move(sizes), dtype);
}

// torch.tensor([...], dtype=...) for 1-D values; int64 by default, as torch infers for ints.
inline Tensor tensor(std::initializer_list<double> values, DType dtype = DType::Int64) {
  return Tensor::from_values(values, dtype);
}

// Prints like torch: "tensor([1., 2., 2., 3.])".
RDMACOLL_API std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace rdmacoll
