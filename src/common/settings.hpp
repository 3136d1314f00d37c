#pragma once
// Every RDMACOLL_* setting, declared once (its constant below: name, type, range, default;
// settings.cpp's registry adds whether the ranks must agree and the help), and read through
// strict parsers: a value out of range, not finite,
// with stray characters, an unknown unit or an unknown choice is an InvalidArgument naming the
// variable and what it takes, never a silent zero, an overflow or a std::length_error. The
// README's table of settings is this registry's markdown_table() (a unit test checks it), and
// `rdmacoll-run --help-env` prints it.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rdmacoll::settings {

enum class Type { Choice, Count, Duration, Text };
// Job: every rank must see the same value; init_process_group compares them and every rank
// raises, naming each rank's value, when they differ.
enum class Scope { Rank, Job };

// Every setting is one constant below, of the type its reader returns: its name, bounds and
// default are stated there once, the registry (settings.cpp) is made from the constants, and
// code reads a setting only through its constant (read()), never by a string.

// A count whose default is a plain number; code that sizes arrays by a bound names it at
// compile time.
struct Number {
  std::string_view name;
  uint64_t value;  // the default
  uint64_t min;
  uint64_t max;
};
// A count with no one default: unset, the code that reads it decides (from the port, the
// host's cores, the group's shape).
struct Count {
  std::string_view name;
  std::string_view default_text;  // what happens when unset, as the README says it
  uint64_t min;
  uint64_t max;
};
// One of a few words, the first the default. value() names a word at compile time, so that a
// comparison with a word the setting does not list fails to build.
template <size_t N>
struct Choice {
  std::string_view name;
  std::array<std::string_view, N> values;
  consteval std::string_view value(std::string_view v) const {
    for (std::string_view c : values) {
      if (c == v) return c;
    }
    throw "not one of this setting's choices";
  }
};
// Free text, checked where it is used (addresses, subnets, P_Keys).
struct Text {
  std::string_view name;
  std::string_view default_text;  // what happens when unset
};
// Seconds, or with a unit (ms, s, m, h).
struct Duration {
  std::string_view name;
  std::chrono::milliseconds value;  // the default
  std::chrono::milliseconds min;
  std::chrono::milliseconds max;
};

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

inline constexpr Duration kTimeout{"RDMACOLL_TIMEOUT_S", std::chrono::minutes(30),
                                   std::chrono::milliseconds(1), std::chrono::hours(24 * 30)};
inline constexpr Text kAuthToken{"RDMACOLL_AUTH_TOKEN", "none"};
inline constexpr Text kJobId{"RDMACOLL_JOB_ID", "the launcher's"};
inline constexpr Text kStoreBind{"RDMACOLL_STORE_BIND", "MASTER_ADDR"};
inline constexpr Choice<3> kTransport{"RDMACOLL_TRANSPORT", {"auto", "ucx", "verbs"}};
inline constexpr Text kIbDevice{"RDMACOLL_IB_DEVICE", "nearest ACTIVE"};
inline constexpr Count kIbPort{"RDMACOLL_IB_PORT", "first ACTIVE", 1, 255};
inline constexpr Count kGidIndex{"RDMACOLL_GID_INDEX", "RoCE v2 IPv4", 0, 65535};
inline constexpr Choice<6> kAlgo{"RDMACOLL_ALGO",
                                 {"auto", "rd", "bruck", "ring", "direct", "two_level"}};
inline constexpr Choice<3> kAllToAll{"RDMACOLL_ALLTOALL", {"auto", "direct", "bruck"}};
inline constexpr Choice<4> kDescriptors{"RDMACOLL_DESCRIPTORS",
                                        {"auto", "direct", "bruck", "rooted"}};
inline constexpr Choice<2> kTopology{"RDMACOLL_TOPOLOGY", {"auto", "flat"}};
inline constexpr Text kHostId{"RDMACOLL_HOST_ID", "hostname"};
inline constexpr Choice<3> kUcxProtocol{"RDMACOLL_UCX_PROTOCOL", {"auto", "tag", "put"}};
inline constexpr Choice<2> kPeerReads{"RDMACOLL_PEER_READS", {"1", "0"}};
inline constexpr Count kSpinUs{"RDMACOLL_SPIN_US", "200 (2000 oversubscribed)", 0, 10'000'000};
inline constexpr Count kEagerLimit{"RDMACOLL_EAGER_LIMIT", "64 KiB / 1 MiB/p / 2 KiB", 0, 4 * kMiB};
inline constexpr Choice<3> kDebug{"RDMACOLL_DEBUG", {"warn", "info", "trace"}};
inline constexpr Text kIbAddrFamily{"RDMACOLL_IB_ADDR_FAMILY", "ipv4 first"};
inline constexpr Text kIbAddrRange{"RDMACOLL_IB_ADDR_RANGE", "any"};
inline constexpr Text kIbPkey{"RDMACOLL_IB_PKEY", "index 0"};
inline constexpr Count kIbTrafficClass{"RDMACOLL_IB_TC", "sysfs or 0", 0, 255};
inline constexpr Number kIbServiceLevel{"RDMACOLL_IB_SL", 0, 0, 15};
inline constexpr Number kIbAckTimeout{"RDMACOLL_IB_TIMEOUT", 20, 1, 31};
inline constexpr Number kIbRetryCount{"RDMACOLL_IB_RETRY_CNT", 7, 0, 7};
inline constexpr Choice<6> kIbMtu{"RDMACOLL_IB_MTU",
                                  {"auto", "256", "512", "1024", "2048", "4096"}};
inline constexpr Number kIbChunk{"RDMACOLL_IB_CHUNK", kMiB, 4096, 1024 * kMiB};
inline constexpr Number kIbQpsPerPeer{"RDMACOLL_IB_QPS_PER_PEER", 1, 1, 16};
inline constexpr Choice<2> kIbAdaptiveRouting{"RDMACOLL_IB_ADAPTIVE_ROUTING", {"0", "1"}};
inline constexpr Number kIbEagerSlots{"RDMACOLL_IB_EAGER_SLOTS", 8, 0, 64};
inline constexpr Number kMrCacheMb{"RDMACOLL_MR_CACHE_MB", 2048, 0, uint64_t{1} << 30};
inline constexpr Choice<3> kForkInit{"RDMACOLL_FORK_INIT", {"auto", "0", "1"}};
// For the project's own tests; not in the README's table.
inline constexpr Choice<2> kProgress{"RDMACOLL_PROGRESS", {"0", "1"}};
inline constexpr Count kTestMaxMessage{"RDMACOLL_TEST_MAX_MESSAGE", "none", 4096, UINT64_MAX};
inline constexpr Number kTestQpDelayMs{"RDMACOLL_TEST_QP_DELAY_MS", 0, 0, 600'000};
inline constexpr Count kTestQpDelayRank{"RDMACOLL_TEST_QP_DELAY_RANK", "none", 0, 1u << 24};
inline constexpr Count kTestSrqReceives{"RDMACOLL_TEST_SRQ_RECEIVES", "the device's", 17, 8192};

struct Spec {
  std::string_view name;
  Type type;
  Scope scope;
  std::string default_text;  // as the documentation shows it
  uint64_t min = 0;          // Count: bounds; Duration: bounds in ms
  uint64_t max = 0;
  std::vector<std::string_view> choices;  // Choice: the first is the default
  std::string_view help;
  bool secret = false;     // never printed (RDMACOLL_AUTH_TOKEN)
  bool test_hook = false;  // for the project's own tests; not in the README's table
};

// Every setting, in the README's order.
const std::vector<Spec>& all();
// The registered setting `name`; throws std::logic_error for a name never registered (a bug).
const Spec& spec(std::string_view name);

// The readers: a value out of range or not a listed choice is an InvalidArgument.
uint64_t read(const Number& n);                  // the default when unset
std::optional<uint64_t> read(const Count& c);    // nullopt when unset
std::optional<std::string> read(const Text& t);  // nullopt when unset or empty
std::chrono::milliseconds read(const Duration& d);
// The word set (lowercased), or the first when unset.
std::string_view choice_of(std::string_view name);
template <size_t N>
std::string_view read(const Choice<N>& c) {
  return choice_of(c.name);
}

// Parses every registered setting that is set, so that a bad value raises at
// init_process_group, not in the middle of a collective.
void validate_all();
// "NAME=value" lines of the Job settings (unset: empty value), for the cross-rank comparison.
std::string job_wide();
// The README's table: | variable | meaning |, one row per setting but the test hooks.
std::string markdown_table();
// A value for an error message: at most 64 characters.
std::string shown(std::string_view value);

}  // namespace rdmacoll::settings
