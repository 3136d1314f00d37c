#include "common/stream_copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace rdmacoll {

void stream_copy(void* dst_in, const void* src_in, size_t bytes) {
#if defined(__SSE2__)
  auto* dst = static_cast<uint8_t*>(dst_in);
  const auto* src = static_cast<const uint8_t*>(src_in);
  constexpr size_t kLine = 64;
  // Whole lines only: the head up to the destination's next line and the tail are plain copies,
  // so no line is both streamed and cached.
  const size_t head = (kLine - reinterpret_cast<uintptr_t>(dst) % kLine) % kLine;
  if (bytes < head + kLine) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const size_t lines = bytes / kLine * kLine;
  for (size_t i = 0; i < lines; i += kLine) {
    const auto* from = reinterpret_cast<const __m128i*>(src + i);
    auto* to = reinterpret_cast<__m128i*>(dst + i);
    const __m128i q0 = _mm_loadu_si128(from), q1 = _mm_loadu_si128(from + 1);
    const __m128i q2 = _mm_loadu_si128(from + 2), q3 = _mm_loadu_si128(from + 3);
    _mm_stream_si128(to, q0);
    _mm_stream_si128(to + 1, q1);
    _mm_stream_si128(to + 2, q2);
    _mm_stream_si128(to + 3, q3);
  }
  std::memcpy(dst + lines, src + lines, bytes - lines);
#else
  std::memcpy(dst_in, src_in, bytes);
#endif
}

void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace rdmacoll
