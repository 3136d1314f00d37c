#include "rdmacoll/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <sstream>

#include "api/dtype.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll {

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
      return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::Float64:
      return 8;
  }
  throw InvalidArgument("unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

bool is_floating_point(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32 ||
         dtype == DType::Float64;
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "torch.bool";
    case DType::UInt8:
      return "torch.uint8";
    case DType::Int8:
      return "torch.int8";
    case DType::Int16:
      return "torch.int16";
    case DType::Int32:
      return "torch.int32";
    case DType::Int64:
      return "torch.int64";
    case DType::Float16:
      return "torch.float16";
    case DType::BFloat16:
      return "torch.bfloat16";
    case DType::Float32:
      return "torch.float32";
    case DType::Float64:
      return "torch.float64";
  }
  return "torch.<unknown dtype " + std::to_string(static_cast<int>(dtype)) + ">";
}

namespace {

// Elements are read as int64 when both sides are integral (exact for every integer dtype),
// else as double.
int64_t load_int(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::Bool:
      return static_cast<const uint8_t*>(p)[i] != 0;
    case DType::UInt8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::Int8:
      return static_cast<const int8_t*>(p)[i];
    case DType::Int16:
      return static_cast<const int16_t*>(p)[i];
    case DType::Int32:
      return static_cast<const int32_t*>(p)[i];
    case DType::Int64:
      return static_cast<const int64_t*>(p)[i];
    default:
      return 0;
  }
}

double load_double(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::Float16:
      return detail::half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::BFloat16:
      return detail::bfloat16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::Float32:
      return static_cast<const float*>(p)[i];
    case DType::Float64:
      return static_cast<const double*>(p)[i];
    default:
      return static_cast<double>(load_int(p, t, i));
  }
}

// Float to integer without undefined behaviour: NaN becomes 0, out-of-range saturates.
int64_t double_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

void store_int(void* p, DType t, size_t i, int64_t v) {
  switch (t) {
    case DType::Bool:
      static_cast<uint8_t*>(p)[i] = v != 0;
      break;
    case DType::UInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DType::Int8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DType::Int16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DType::Int32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::Int64:
      static_cast<int64_t*>(p)[i] = v;
      break;
    default:
      break;
  }
}

void store_double(void* p, DType t, size_t i, double v) {
  switch (t) {
    case DType::Bool:
      static_cast<uint8_t*>(p)[i] = v != 0.0;
      break;
    case DType::Float16:
      static_cast<uint16_t*>(p)[i] = detail::float_to_half(static_cast<float>(v));
      break;
    case DType::BFloat16:
      static_cast<uint16_t*>(p)[i] = detail::float_to_bfloat16(static_cast<float>(v));
      break;
    case DType::Float32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::Float64:
      static_cast<double*>(p)[i] = v;
      break;
    default:
      store_int(p, t, i, double_to_int(v));
      break;
  }
}

template <typename To, typename From>
void convert_loop(To* dst, const From* src, size_t n) {
  for (size_t i = 0; i < n; ++i)
    dst[i] = static_cast<To>(src[i]);
}

}  // namespace

void convert_elements(void* dst, DType to, const void* src, DType from, size_t count) {
  if (count == 0) return;
  if (to == from) {
    std::memmove(dst, src, count * element_size(to));
    return;
  }
  // The common mixed-precision pairs get tight loops; the rest go element by element.
  if (to == DType::Float32 && from == DType::Int64) {
    convert_loop(static_cast<float*>(dst), static_cast<const int64_t*>(src), count);
    return;
  }
  if (to == DType::Float64 && from == DType::Float32) {
    convert_loop(static_cast<double*>(dst), static_cast<const float*>(src), count);
    return;
  }
  const bool integral = !is_floating_point(to) && !is_floating_point(from);
  for (size_t i = 0; i < count; ++i) {
    if (integral) {
      store_int(dst, to, i, load_int(src, from, i));
    } else {
      store_double(dst, to, i, load_double(src, from, i));
    }
  }
}

Tensor Tensor::view(void* data, DType dtype, std::vector<int64_t> sizes) {
  for (int64_t s : sizes) {
    if (s < 0) throw InvalidArgument("Tensor::view: negative size " + std::to_string(s));
  }
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.sizes_ = std::move(sizes);
  if (t.data_ == nullptr && t.numel() != 0) {
    throw InvalidArgument("Tensor::view: null data for " + std::to_string(t.numel()) + " elements");
  }
  return t;
}

Tensor Tensor::zeros(std::vector<int64_t> sizes, DType dtype) {
  Tensor t;
  t.dtype_ = dtype;
  t.sizes_ = std::move(sizes);
  for (int64_t s : t.sizes_) {
    if (s < 0) throw InvalidArgument("zeros: negative size " + std::to_string(s));
  }
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
  return load_double(data_, dtype_, static_cast<size_t>(i));
}

void Tensor::set(int64_t i, double v) {
  if (i < 0 || i >= numel()) {
    throw InvalidArgument("Tensor::set: index " + std::to_string(i) + " out of range for " +
                          std::to_string(numel()) + " elements");
  }
  store_double(data_, dtype_, static_cast<size_t>(i), v);
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
