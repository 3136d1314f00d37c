#pragma once
// Copies whose destination is not read again soon: a store that misses the cache first reads
// the line it overwrites (read for ownership); a non-temporal store writes the line to memory
// without that read, and leaves the cache to what will be read. Worth it only where the copies
// of a call together exceed the last-level cache, so that the lines would have gone to memory
// anyway (measured: docs/performance.md, the code's thresholds).

#include <cstddef>

namespace rdmacoll {

// Copies `bytes` from `src` to `dst` with non-temporal stores where the CPU has them (x86-64),
// plain ones elsewhere and for the unaligned head and tail. The stores are weakly ordered:
// stream_fence() before anything publishes them to another process.
void stream_copy(void* dst, const void* src, size_t bytes);
// Orders every earlier stream_copy's stores before later stores (sfence).
void stream_fence();

}  // namespace rdmacoll
