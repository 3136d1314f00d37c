#pragma once
// Strict parsing of numeric RDMACOLL_* settings: a value out of range, not finite, with stray
// characters or an unknown unit is an InvalidArgument naming the variable, never a silent
// zero, an overflow or a std::length_error.

#include <chrono>
#include <cstdint>

namespace rdmacoll::settings {

// A whole number in [min, max]; `fallback` when unset or empty.
uint64_t env_uint(const char* name, uint64_t fallback, uint64_t min, uint64_t max);

// Seconds (a finite decimal, optionally with a unit: ms, s, m, h) in [min, max], rounded up to
// whole milliseconds; `fallback` when unset or empty.
std::chrono::milliseconds env_duration(const char* name, std::chrono::milliseconds fallback,
                                       std::chrono::milliseconds min,
                                       std::chrono::milliseconds max);

}  // namespace rdmacoll::settings
