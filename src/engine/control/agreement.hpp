#pragma once
// Whether the ranks agree on a call (agreement.cpp): every rank sees the same descriptors, so
// every rank raises the same InvalidArgument, for a different collective, a rank that rejected
// its arguments, or sizes, dtypes, lengths, the reduce operator or the eager path that differ.

#include <string>
#include <vector>

#include "engine/call.hpp"
#include "engine/core/call_descriptor.hpp"

namespace rdmacoll::engine {

// Raises InvalidArgument(where: reason), noting the reason for the neighbours (ring-step mode).
[[noreturn]] void reject(const Call& call, const std::string& reason);

// A call that saw only its successor's descriptor checks that pair.
void check_same_collective(const Call& call, const std::vector<CallDescriptor>& all);
void check_descriptors(const Call& call, const std::vector<CallDescriptor>& all);
// Raises for a rank that rejected its own arguments (check_descriptors does this too).
void check_rejections(const Call& call, const std::vector<CallDescriptor>& all);
// The checks of check_descriptors for ranks a (ours) and b: the ring step's early look.
void check_pair(const Call& call, int a, const CallDescriptor& da, int b, const CallDescriptor& db);
// "rank R rejected its arguments: why".
std::string rejected_arguments(const Call& call, int r, const CallDescriptor& d);

}  // namespace rdmacoll::engine
