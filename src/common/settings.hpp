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

struct Spec {
  std::string_view name;
  Type type;
  Scope scope;
  std::string_view default_text;  // as the documentation shows it
  uint64_t min = 0;               // Count: bounds; Duration: bounds in ms
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
