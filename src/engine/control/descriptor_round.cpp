#include "engine/control/descriptor_round.hpp"

#include <cstring>
#include <string>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

void pack_round(int n, const std::function<std::span<const uint8_t>(int)>& descriptor, size_t limit,
                std::vector<uint8_t>& out, std::vector<size_t>& starts) {
  out.assign(kRoundMessageHeader, 0);
  starts.assign(1, 0);
  for (int i = 0; i < n; ++i) {
    const std::span<const uint8_t> d = descriptor(i);
    const uint32_t len = static_cast<uint32_t>(d.size());
    const size_t used = out.size() - starts.back();
    if (used > kRoundMessageHeader && used + 4 + len > limit) {
      out[starts.back()] = 1;  // more follows
      starts.push_back(out.size());
      out.push_back(0);
    }
    const uint8_t* l = reinterpret_cast<const uint8_t*>(&len);
    out.insert(out.end(), l, l + 4);
    out.insert(out.end(), d.begin(), d.end());
  }
}

bool parse_round_message(std::span<const uint8_t> message, int n, int& received, size_t capacity,
                         const std::function<void(int, std::span<const uint8_t>)>& take) {
  const size_t got = message.size();
  const uint8_t* in = message.data();
  if (got <= kRoundMessageHeader) {
    throw TransportError("a message of " + std::to_string(got) + " bytes holds no descriptor");
  }
  if (in[0] > 1) throw TransportError("bad flag " + std::to_string(in[0]));
  size_t at = kRoundMessageHeader;
  while (at < got) {
    if (received >= n) {
      throw TransportError("more than the round's " + std::to_string(n) + " descriptors");
    }
    uint32_t len = 0;
    if (at + 4 > got) throw TransportError("a length cut off at byte " + std::to_string(at));
    std::memcpy(&len, in + at, 4);
    if (len > capacity || at + 4 + len > got) {
      throw TransportError("a descriptor of " + std::to_string(len) + " bytes at byte " +
                           std::to_string(at) + " of " + std::to_string(got) + " (at most " +
                           std::to_string(capacity) + ")");
    }
    take(received, message.subspan(at + 4, len));
    at += 4 + len;
    ++received;
  }
  const bool more = in[0] == 1;
  if (more && received >= n) {
    throw TransportError("another message announced after the round's last descriptor");
  }
  return more;
}

}  // namespace rdmacoll::engine
