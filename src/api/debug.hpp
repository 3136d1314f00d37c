#pragma once
// Introspection for tests; not part of the installed API.

#include <cstdint>

namespace rdmacoll::detail {

// Memory registrations the transport has made so far (registration-cache misses).
uint64_t memory_registrations();

}  // namespace rdmacoll::detail
