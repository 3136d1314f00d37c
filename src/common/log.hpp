#pragma once
// Minimal leveled logging to stderr, controlled by RDMACOLL_DEBUG=warn|info|trace.

#include <string>

namespace rdmacoll::log {

enum class Level { Warn = 0, Info = 1, Trace = 2 };

// Reads RDMACOLL_DEBUG again (init_process_group calls it, so a re-init takes a new value).
void configure();
bool enabled(Level level);
void write(Level level, const std::string& message);

inline void info(const std::string& m) {
  if (enabled(Level::Info)) write(Level::Info, m);
}
inline void trace(const std::string& m) {
  if (enabled(Level::Trace)) write(Level::Trace, m);
}
inline void warn(const std::string& m) {
  write(Level::Warn, m);
}

}  // namespace rdmacoll::log
