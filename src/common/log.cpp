#include "common/log.hpp"
#include "common/settings.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace rdmacoll::log {

namespace {
Level configured() {
  static const Level level = [] {
    // A bad value is init_process_group's error to raise (settings::validate_all); logging
    // itself never throws.
    std::string s;
    try {
      s = settings::choice("RDMACOLL_DEBUG");
    } catch (const std::exception&) {
      s = "warn";
    }
    if (s == "info") return Level::Info;
    if (s == "trace") return Level::Trace;
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
