// libFuzzer target: the rendezvous store's server side (bootstrap/store_protocol) fed arbitrary
// bytes by two clients, in arbitrary pieces. Checks what a hostile client must never break:
// no crash or out-of-bounds access (ASan/UBSan), replies that are well-formed frames, and
// buffers within the limits.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bootstrap/store_protocol.hpp"

using namespace rdmacoll::bootstrap;

namespace {

void check_replies(const Connection& c) {
  size_t at = 0;
  while (at + sizeof(FrameHeader) <= c.outbuf.size()) {
    FrameHeader h;
    std::memcpy(&h, c.outbuf.data() + at, sizeof h);
    if (h.magic != kStoreMagic) std::abort();
    at += sizeof h + h.key_len + h.value_len;
  }
  if (at != c.outbuf.size()) std::abort();  // a reply cut short
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // No token: a hello with an empty job id and no proof is accepted, so the fuzzer reaches
  // every request past the challenge.
  static const StoreCredentials creds{};
  static const StoreLimits limits = [] {
    StoreLimits l;
    l.max_buffered_per_connection = 1 << 16;
    l.max_buffered_total = 1 << 17;
    l.max_stored_bytes = 1 << 16;
    return l;
  }();
  StoreState state(creds, limits);
  state.accept(3);
  state.accept(4);
  // Byte 0 seeds how the rest is cut into pieces and which client sends each.
  uint32_t rng = data[0] * 2654435761u + 1;
  size_t at = 1;
  while (at < size) {
    rng = rng * 1664525u + 1013904223u;
    const int fd = 3 + static_cast<int>((rng >> 16) & 1);
    const size_t n = std::min<size_t>(size - at, 1 + ((rng >> 8) % 64));
    auto it = state.conns().find(fd);
    if (it != state.conns().end()) {
      std::string why;
      if (!state.receive(it->second, data + at, n, why)) {
        state.drop(fd);
      } else {
        check_replies(it->second);
        if (it->second.buffered() > limits.max_buffered_per_connection + (1 << 16)) std::abort();
        it->second.out_sent = it->second.outbuf.size();  // the client reads every reply
      }
    }
    at += n;
  }
  std::vector<std::pair<int, std::string>> expired;
  state.expire(expired);
  return 0;
}
