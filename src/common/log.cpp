#include "common/log.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace rdmacoll::log {

namespace {
Level configured() {
  static const Level level = [] {
    const char* v = std::getenv("RDMACOLL_DEBUG");
    const std::string_view s = v ? v : "warn";
    if (s == "info" || s == "INFO") return Level::Info;
    if (s == "trace" || s == "TRACE") return Level::Trace;
    return Level::Warn;
  }();
  return level;
}
}  // namespace

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
