#pragma once
// Every RDMACOLL_* setting, declared once (settings.cpp: name, type, range, default, whether the
// ranks must agree, help), and read through strict parsers: a value out of range, not finite,
// with stray characters, an unknown unit or an unknown choice is an InvalidArgument naming the
// variable and what it takes, never a silent zero, an overflow or a std::length_error. The
// README's table of settings is this registry's markdown_table() (a unit test checks it), and
// `rdmacoll-run --help-env` prints it.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rdmacoll::settings {

enum class Type { Choice, Count, Duration, Text };
// Job: every rank must see the same value; init_process_group compares them and every rank
// raises, naming each rank's value, when they differ.
enum class Scope { Rank, Job };

// A Count whose default and bounds are plain numbers, stated here once: the registry takes them
// from here, readers get the default from count(name), and code that sizes arrays by a bound
// names it at compile time.
struct Number {
  std::string_view name;
  uint64_t value;  // the default
  uint64_t min;
  uint64_t max;
};
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr Number kIbServiceLevel{"RDMACOLL_IB_SL", 0, 0, 15};
inline constexpr Number kIbAckTimeout{"RDMACOLL_IB_TIMEOUT", 20, 1, 31};
inline constexpr Number kIbRetryCount{"RDMACOLL_IB_RETRY_CNT", 7, 0, 7};
inline constexpr Number kIbChunk{"RDMACOLL_IB_CHUNK", kMiB, 4096, 1024 * kMiB};
inline constexpr Number kIbQpsPerPeer{"RDMACOLL_IB_QPS_PER_PEER", 1, 1, 16};
inline constexpr Number kIbEagerSlots{"RDMACOLL_IB_EAGER_SLOTS", 8, 0, 64};
inline constexpr Number kMrCacheMb{"RDMACOLL_MR_CACHE_MB", 2048, 0, uint64_t{1} << 30};
inline constexpr Number kTestQpDelayMs{"RDMACOLL_TEST_QP_DELAY_MS", 0, 0, 600'000};

struct Spec {
  std::string_view name;
  Type type;
  Scope scope;
  std::string default_text;  // as the documentation shows it
  uint64_t min = 0;          // Count: bounds; Duration: bounds in ms
  uint64_t max = 0;
  std::vector<std::string_view> choices;  // Choice: the first is the default
  std::string_view help;
  bool secret = false;     // never printed (RDMACOLL_AUTH_TOKEN)
  bool test_hook = false;  // for the project's own tests; not in the README's table
};

// Every setting, in the README's order.
const std::vector<Spec>& all();
// The registered setting `name`; throws std::logic_error for a name never registered (a bug).
const Spec& spec(std::string_view name);

// The raw value, nullopt when unset or empty.
std::optional<std::string> text(std::string_view name);
// A Choice: the value, or the first choice when unset.
std::string choice(std::string_view name);
// A Count in the registry's bounds; `fallback` when unset (may lie outside them: "none").
uint64_t count(std::string_view name, uint64_t fallback);
// A Count whose default is a number (a Number's): that default when unset.
uint64_t count(const Number& n);
// A Duration in the registry's bounds (seconds, or with a unit: ms, s, m, h); `fallback` when
// unset.
std::chrono::milliseconds duration(std::string_view name, std::chrono::milliseconds fallback);

// Parses every registered setting that is set, so that a bad value raises at
// init_process_group, not in the middle of a collective.
void validate_all();
// "NAME=value" lines of the Job settings (unset: empty value), for the cross-rank comparison.
std::string job_wide();
// The README's table: | variable | meaning |, one row per setting but the test hooks.
std::string markdown_table();
// A value for an error message: at most 64 characters.
std::string shown(std::string_view value);

// Low-level parsers (the registry's readers use them; bounds given here).
uint64_t env_uint(const char* name, uint64_t fallback, uint64_t min, uint64_t max);
std::chrono::milliseconds env_duration(const char* name, std::chrono::milliseconds fallback,
                                       std::chrono::milliseconds min,
                                       std::chrono::milliseconds max);

}  // namespace rdmacoll::settings
