#include "rdmacoll/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <sstream>

#include "api/shape.hpp"
#include "common/elements.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll {

namespace api {

// Sizes must be non-negative and their product, in bytes, must fit: a shape whose element
// count wraps (to 0, say) would describe memory it does not have.
int64_t checked_bytes(const std::vector<int64_t>& sizes, DType dtype, const char* where) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s < 0) throw InvalidArgument(std::string(where) + ": negative size " + std::to_string(s));
    if (__builtin_mul_overflow(n, s, &n)) n = -1;
    if (n < 0) break;
  }
  int64_t bytes = 0;
  if (n < 0 || __builtin_mul_overflow(n, static_cast<int64_t>(element_size(dtype)), &bytes)) {
    std::string shape;
    for (size_t i = 0; i < sizes.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(sizes[i]);
    throw InvalidArgument(std::string(where) + ": the shape [" + shape +
                          "] has more bytes than fit in 63 bits");
  }
  return bytes;
}

}  // namespace api

namespace {

void check_shape(const std::vector<int64_t>& sizes, DType dtype, const char* where) {
  (void)api::checked_bytes(sizes, dtype, where);
}

}  // namespace

Tensor Tensor::view(void* data, DType dtype, std::vector<int64_t> sizes) {
  check_shape(sizes, dtype, "Tensor::view");
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.sizes_ = std::move(sizes);
  if (t.data_ == nullptr && t.numel() != 0) {
    throw InvalidArgument("Tensor::view: null data for " + std::to_string(t.numel()) + " elements");
  }
  return t;
}

Tensor Tensor::owning(std::shared_ptr<void> owner, void* data, DType dtype,
                      std::vector<int64_t> sizes) {
  Tensor t = view(data, dtype, std::move(sizes));
  t.storage_ = std::move(owner);
  return t;
}

Tensor Tensor::zeros(std::vector<int64_t> sizes, DType dtype) {
  Tensor t;
  check_shape(sizes, dtype, "zeros");
  t.dtype_ = dtype;
  t.sizes_ = std::move(sizes);
  // At least one byte so that data() is non-null and distinct per tensor, like torch.
  const size_t bytes = std::max<size_t>(t.nbytes(), 1);
  t.storage_ = std::shared_ptr<void>(std::calloc(bytes, 1), std::free);
  if (!t.storage_) throw Error("zeros: out of memory for " + std::to_string(bytes) + " bytes");
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::from_values(std::initializer_list<double> values, DType dtype) {
  Tensor t = zeros({static_cast<int64_t>(values.size())}, dtype);
  int64_t i = 0;
  for (double v : values)
    t.set(i++, v);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes_)
    n *= s;
  return n;
}

double Tensor::item(int64_t i) const {
  if (i < 0 || i >= numel()) {
    throw InvalidArgument("Tensor::item: index " + std::to_string(i) + " out of range for " +
                          std::to_string(numel()) + " elements");
  }
  return load_element(data_, dtype_, static_cast<size_t>(i));
}

void Tensor::set(int64_t i, double v) {
  if (i < 0 || i >= numel()) {
    throw InvalidArgument("Tensor::set: index " + std::to_string(i) + " out of range for " +
                          std::to_string(numel()) + " elements");
  }
  store_element(data_, dtype_, static_cast<size_t>(i), v);
}

Tensor Tensor::select(int64_t i) const {
  if (sizes_.empty() || i < 0 || i >= sizes_[0]) {
    throw InvalidArgument("Tensor::select: index " + std::to_string(i) + " out of range");
  }
  Tensor t = *this;
  t.sizes_.erase(t.sizes_.begin());
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(i) * t.nbytes();
  return t;
}

namespace {

// Formats elements the way torch's _tensor_str does for the common cases: integral floats as
// "1.", others with 4 decimals, scientific when the range is wide; right-aligned to one width.
struct Formatter {
  DType dtype;
  bool sci = false;
  bool integral_floats = true;
  size_t width = 1;

  std::string format(double v) const {
    char buf[64];
    if (dtype == DType::Bool) return v != 0.0 ? "True" : "False";
    if (!is_floating_point(dtype)) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      return "nan";
    } else if (std::isinf(v)) {
      return v > 0 ? "inf" : "-inf";
    } else if (sci) {
      std::snprintf(buf, sizeof buf, "%.4e", v);
    } else if (integral_floats) {
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.4f", v);
    }
    return buf;
  }
};

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

void visible_indices(int64_t n, bool summarize, std::vector<int64_t>& out) {
  out.clear();
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i)
      out.push_back(i);
    out.push_back(-1);  // "..."
    for (int64_t i = n - kEdgeItems; i < n; ++i)
      out.push_back(i);
  } else {
    for (int64_t i = 0; i < n; ++i)
      out.push_back(i);
  }
}

void collect(const Tensor& t, bool summarize, std::vector<double>& values) {
  if (t.dim() == 0) {
    values.push_back(t.item(0));
    return;
  }
  std::vector<int64_t> idx;
  visible_indices(t.sizes()[0], summarize, idx);
  for (int64_t i : idx) {
    if (i < 0) continue;
    if (t.dim() == 1) {
      values.push_back(t.item(i));
    } else {
      collect(t.select(i), summarize, values);
    }
  }
}

void print_rec(std::ostream& os, const Tensor& t, const Formatter& f, bool summarize,
               size_t indent) {
  if (t.dim() == 0) {
    os << f.format(t.item(0));
    return;
  }
  std::vector<int64_t> idx;
  visible_indices(t.sizes()[0], summarize, idx);
  os << '[';
  bool first = true;
  for (int64_t i : idx) {
    if (!first) {
      if (t.dim() == 1) {
        os << ", ";
      } else {
        os << ',' << std::string(t.dim() - 1, '\n') << std::string(indent + 1, ' ');
      }
    }
    first = false;
    if (i < 0) {
      os << "...";
      continue;
    }
    if (t.dim() == 1) {
      std::string s = f.format(t.item(i));
      if (s.size() < f.width) os << std::string(f.width - s.size(), ' ');
      os << s;
    } else {
      print_rec(os, t.select(i), f, summarize, indent + 1);
    }
  }
  os << ']';
}

}  // namespace

std::string Tensor::to_string() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  const bool default_dtype =
      t.dtype() == DType::Float32 || t.dtype() == DType::Int64 || t.dtype() == DType::Bool;
  std::string suffix = default_dtype ? "" : ", dtype=" + dtype_name(t.dtype());
  if (t.numel() == 0) {
    if (t.dtype() != DType::Float32) suffix = ", dtype=" + dtype_name(t.dtype());
    return os << "tensor([]" << suffix << ")";
  }
  const bool summarize = t.numel() > kSummarizeThreshold;
  std::vector<double> values;
  collect(t, summarize, values);
  Formatter f{t.dtype()};
  if (is_floating_point(t.dtype())) {
    double max_abs = 0.0, min_abs = INFINITY;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::nearbyint(v)) f.integral_floats = false;
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0.0) min_abs = std::min(min_abs, std::fabs(v));
    }
    if (f.integral_floats) {
      f.sci = max_abs > 1e8;
    } else {
      f.sci = max_abs / min_abs > 1000.0 || max_abs > 1e8 || min_abs < 1e-4;
    }
  }
  for (double v : values)
    f.width = std::max(f.width, f.format(v).size());
  os << "tensor(";
  print_rec(os, t, f, summarize, std::string("tensor(").size());
  return os << suffix << ')';
}

}  // namespace rdmacoll
