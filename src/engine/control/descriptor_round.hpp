#pragma once
// The framing of one round of the descriptor all-gather (Bruck's or recursive doubling's, in
// engine/control/descriptor_messages.cpp): the descriptors a rank passes on in a round, as one
// message or several when they exceed the transport's largest control message (verbs: 4 KiB, where
// a descriptor with an eager chunk takes 2 KiB). Each message is a flag byte (1: another message of
// this round follows), then whole descriptors, each a 4-byte length and the bytes. Pure functions,
// so the parser that reads what a peer sent is unit-tested and fuzzed (fuzz/).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace rdmacoll::engine {

inline constexpr size_t kRoundMessageHeader = 1;

// Packs descriptors 0..n-1 (descriptor(i)) into `out`, cut into messages of at most `limit`
// bytes; `starts` receives where each message begins. A message holds at least one
// descriptor (the caller has checked that one fits: kRoundMessageHeader + 4 + capacity).
void pack_round(int n, const std::function<std::span<const uint8_t>(int)>& descriptor, size_t limit,
                std::vector<uint8_t>& out, std::vector<size_t>& starts);

// Reads one message of a round that carries `n` descriptors, `received` of which came in
// earlier messages: take(i, bytes) for each descriptor i in it, in order. Returns whether
// another message of the round follows. Throws TransportError naming the flaw when the message
// is not one the sender could have packed: no descriptor, a bad flag, a length past the
// message's end or above `capacity`, more descriptors than the round carries, or another
// message announced after the last descriptor. The caller checks received == n at the end.
bool parse_round_message(std::span<const uint8_t> message, int n, int& received, size_t capacity,
                         const std::function<void(int, std::span<const uint8_t>)>& take);

}  // namespace rdmacoll::engine
