// The framing of a descriptor round (engine/control/descriptor_round.hpp): what a sender packs
// reads back whole at any message limit, and every kind of message a hostile or broken peer could
// send instead raises TransportError naming the flaw, never reads past the message.
#include "engine/control/descriptor_round.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {
namespace {

using Bytes = std::vector<uint8_t>;

std::vector<Bytes> descriptors(int n, size_t base_len) {
  std::vector<Bytes> v;
  for (int i = 0; i < n; ++i) {
    Bytes d(base_len + static_cast<size_t>(i % 7) * 100);
    for (size_t b = 0; b < d.size(); ++b)
      d[b] = static_cast<uint8_t>(i * 31 + b);
    v.push_back(std::move(d));
  }
  return v;
}

// Packs, then parses message by message as receive_round does.
std::vector<Bytes> round_trip(const std::vector<Bytes>& in, size_t limit, size_t capacity,
                              size_t* messages) {
  Bytes out;
  std::vector<size_t> starts;
  const int n = static_cast<int>(in.size());
  pack_round(
      n, [&](int i) { return std::span<const uint8_t>(in[i]); }, limit, out, starts);
  std::vector<Bytes> got(in.size());
  int received = 0;
  for (size_t j = 0; j < starts.size(); ++j) {
    const size_t end = j + 1 < starts.size() ? starts[j + 1] : out.size();
    EXPECT_LE(end - starts[j], limit);
    const Bytes message(out.begin() + static_cast<std::ptrdiff_t>(starts[j]),
                        out.begin() + static_cast<std::ptrdiff_t>(end));
    const bool more = parse_round_message(
        message, n, received, capacity,
        [&](int i, std::span<const uint8_t> d) { got[i].assign(d.begin(), d.end()); });
    EXPECT_EQ(more, j + 1 < starts.size());
  }
  EXPECT_EQ(received, n);
  *messages = starts.size();
  return got;
}

TEST(DescriptorRound, PacksAndReadsBackAtEveryLimit) {
  const size_t capacity = 4096;
  for (int n : {1, 2, 3, 4, 16, 512}) {
    for (size_t base : {size_t{0}, size_t{270}, size_t{2300}}) {
      const auto in = descriptors(n, base);
      for (size_t limit : {size_t{4160}, size_t{8192}, size_t{1} << 20}) {
        size_t messages = 0;
        EXPECT_EQ(round_trip(in, limit, capacity, &messages), in)
            << n << " descriptors of " << base << "+ bytes in messages of " << limit;
        if (limit == (size_t{1} << 20) && base < 2300) {
          EXPECT_EQ(messages, 1u);
        }
      }
    }
  }
  // 4 descriptors of 2.2-2.5 KB in verbs' 4160-byte messages: one each.
  size_t messages = 0;
  round_trip(descriptors(4, 2200), 4160, capacity, &messages);
  EXPECT_EQ(messages, 4u);
}

Bytes message(uint8_t flag, const std::vector<uint32_t>& lengths, size_t body_bytes) {
  Bytes m{flag};
  for (uint32_t len : lengths) {
    const uint8_t* l = reinterpret_cast<const uint8_t*>(&len);
    m.insert(m.end(), l, l + 4);
    m.insert(m.end(), std::min<size_t>(len, body_bytes), 0xab);
  }
  return m;
}

void expect_malformed(const Bytes& m, int n, int received, const std::string& why) {
  int r = received;
  try {
    parse_round_message(m, n, r, 4096, [](int, std::span<const uint8_t>) {});
    ADD_FAILURE() << "accepted: " << why;
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(DescriptorRound, MalformedMessagesRaise) {
  expect_malformed({}, 2, 0, "holds no descriptor");
  expect_malformed({0}, 2, 0, "holds no descriptor");
  expect_malformed({1}, 2, 0, "holds no descriptor");  // "more" with nothing: would never end
  expect_malformed(message(2, {10}, 10), 2, 0, "bad flag 2");
  expect_malformed(message(0, {10, 10, 10}, 10), 2, 0, "more than the round's 2 descriptors");
  expect_malformed(message(0, {10}, 10), 2, 2, "more than the round's 2");  // all came before
  expect_malformed(message(0, {4097}, 4097), 2, 0, "of 4097 bytes");        // above capacity
  expect_malformed(message(0, {100}, 99), 2, 0, "of 100 bytes");            // past the end
  Bytes cut = message(0, {10}, 10);
  cut.insert(cut.end(), {1, 2});  // half a length
  expect_malformed(cut, 2, 0, "a length cut off");
  expect_malformed(message(1, {10, 10}, 10), 2, 0, "another message announced");
}

}  // namespace
}  // namespace rdmacoll::engine
