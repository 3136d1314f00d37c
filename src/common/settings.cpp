#include "common/settings.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::settings {

uint64_t env_uint(const char* name, uint64_t fallback, uint64_t min, uint64_t max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::string text = v;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = text[0] == '-' ? 0 : std::strtoull(v, &end, 10);
  if (text[0] == '-' || *end != '\0' || errno == ERANGE || n < min || n > max) {
    throw InvalidArgument(std::string(name) + ": expected a whole number from " +
                          std::to_string(min) + " to " + std::to_string(max) + ", got '" + text +
                          "'");
  }
  return n;
}

std::chrono::milliseconds env_duration(const char* name, std::chrono::milliseconds fallback,
                                       std::chrono::milliseconds min,
                                       std::chrono::milliseconds max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::string text = v;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  const std::string unit = end;
  const double scale = unit.empty() || unit == "s" ? 1e3
                       : unit == "ms"              ? 1.0
                       : unit == "m"               ? 60e3
                       : unit == "h"               ? 3600e3
                                                   : -1;
  const double ms = x * scale;  // not rounded before the range check: 0.0001 s is no 1 ms
  if (end == v || scale < 0 || !std::isfinite(x) || !(ms >= static_cast<double>(min.count())) ||
      !(ms <= static_cast<double>(max.count()))) {
    throw InvalidArgument(std::string(name) +
                          ": expected seconds (units ms, s, m, h allowed) from " +
                          std::to_string(min.count() / 1e3) + " s to " +
                          std::to_string(max.count() / 1e3) + " s, got '" + text + "'");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(ms)));
}

}  // namespace rdmacoll::settings
