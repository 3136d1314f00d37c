#include "common/log.hpp"
#include "common/settings.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace rdmacoll::log {

namespace {
Level from_settings() {
  // A bad value is init_process_group's error to raise (settings::validate_all); logging
  // itself never throws.
  std::string_view s;
  try {
    s = settings::read(settings::kDebug);
  } catch (const std::exception&) {
    return Level::Warn;
  }
  if (s == settings::kDebug.value("info")) return Level::Info;
  if (s == settings::kDebug.value("trace")) return Level::Trace;
  return Level::Warn;
}
// Read at the first line logged, and again at each init_process_group (configure()).
std::atomic<int> g_level{-1};
Level configured() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    l = static_cast<int>(from_settings());
    g_level.store(l, std::memory_order_relaxed);
  }
  return static_cast<Level>(l);
}
}  // namespace

void configure() {
  g_level.store(static_cast<int>(from_settings()), std::memory_order_relaxed);
}

bool enabled(Level level) {
  return level <= configured();
}

void write(Level level, const std::string& message) {
  static const char* names[] = {"WARN", "INFO", "TRACE"};
  // One fprintf per line so lines from concurrent ranks do not interleave mid-line.
  std::fprintf(stderr, "rdmacoll %s [pid %d] %s\n", names[static_cast<int>(level)],
               static_cast<int>(getpid()), message.c_str());
}

}  // namespace rdmacoll::log
