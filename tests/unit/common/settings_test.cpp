// The settings registry (common/settings): strict readers, the job-wide list, and the README's
// table, which must be the registry's own.

#include "common/settings.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::settings {
namespace {

struct Env {
  Env(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~Env() { ::unsetenv(name_); }
  const char* name_;
};

TEST(Settings, ChoicesAreStrictAndDefaultToTheFirst) {
  EXPECT_EQ(choice("RDMACOLL_TRANSPORT"), "auto");
  Env e("RDMACOLL_TRANSPORT", "VERBS");
  EXPECT_EQ(choice("RDMACOLL_TRANSPORT"), "verbs");  // case does not matter
  Env d("RDMACOLL_DEBUG", "loud");
  try {
    (void)choice("RDMACOLL_DEBUG");
    FAIL() << "no error";
  } catch (const InvalidArgument& x) {
    EXPECT_STREQ(x.what(), "RDMACOLL_DEBUG: expected one of warn, info, trace, got 'loud'");
  }
}

TEST(Settings, CountsKeepTheirRegisteredBounds) {
  EXPECT_EQ(count("RDMACOLL_IB_SL", 3), 3u);
  {
    Env e("RDMACOLL_IB_SL", "16");
    EXPECT_THROW((void)count("RDMACOLL_IB_SL", 0), InvalidArgument);
  }
  {
    Env e("RDMACOLL_EAGER_LIMIT", std::to_string(4u << 20));
    EXPECT_EQ(count("RDMACOLL_EAGER_LIMIT", 0), 4u << 20);
  }
  Env e("RDMACOLL_EAGER_LIMIT", std::to_string((4u << 20) + 1));
  EXPECT_THROW((void)count("RDMACOLL_EAGER_LIMIT", 0), InvalidArgument);
}

// A Number's default and bounds are stated once (settings.hpp): its reader gets the default
// when unset, the registry holds its bounds, and the README's table shows both.
TEST(Settings, ANumberIsReadRegisteredAndShownWithTheOneDefaultItStates) {
  for (const Number* n : {&kIbServiceLevel, &kIbAckTimeout, &kIbRetryCount, &kIbChunk,
                          &kIbQpsPerPeer, &kIbEagerSlots, &kMrCacheMb, &kTestQpDelayMs}) {
    EXPECT_EQ(count(*n), n->value) << n->name;
    const Spec& s = spec(n->name);
    EXPECT_EQ(s.type, Type::Count) << n->name;
    EXPECT_EQ(s.min, n->min) << n->name;
    EXPECT_EQ(s.max, n->max) << n->name;
  }
  EXPECT_NE(markdown_table().find("| `RDMACOLL_IB_CHUNK` | 4096 to 1073741824 (1 MiB) |"),
            std::string::npos);
  EXPECT_NE(markdown_table().find("| `RDMACOLL_MR_CACHE_MB` | 0 to 1073741824 (2048) |"),
            std::string::npos);
  Env e("RDMACOLL_IB_CHUNK", "8192");
  EXPECT_EQ(count(kIbChunk), 8192u);
}

// Numbers are plain decimals: no blanks, signs, hex or exponents, which strtod and strtoull
// would take ("0x10" s was 16 s; " 5" was 5).
TEST(Settings, NumbersAreDigitsOnly) {
  for (const char* bad : {" 5", "+5", "0x10", "1e3", "5 ", "-0", ".5", "nan"}) {
    Env e("RDMACOLL_IB_SL", bad);
    EXPECT_THROW((void)count("RDMACOLL_IB_SL", 0), InvalidArgument) << "'" << bad << "'";
    Env t("RDMACOLL_TIMEOUT_S", bad);
    EXPECT_THROW((void)duration("RDMACOLL_TIMEOUT_S", std::chrono::milliseconds(1)),
                 InvalidArgument)
        << "'" << bad << "'";
  }
  Env t("RDMACOLL_TIMEOUT_S", "2.5m");
  EXPECT_EQ(duration("RDMACOLL_TIMEOUT_S", std::chrono::milliseconds(1)).count(), 150000);
  Env e("RDMACOLL_IB_SL", "15");
  EXPECT_EQ(count("RDMACOLL_IB_SL", 0), 15u);
}

TEST(Settings, EverySettingTheRanksShareIsCompared) {
  Env e("RDMACOLL_UCX_PROTOCOL", "put");
  const std::string shared = job_wide();
  for (const char* name :
       {"RDMACOLL_TRANSPORT", "RDMACOLL_EAGER_LIMIT", "RDMACOLL_ALGO", "RDMACOLL_TOPOLOGY",
        "RDMACOLL_DESCRIPTORS", "RDMACOLL_IB_QPS_PER_PEER", "RDMACOLL_TEST_MAX_MESSAGE"}) {
    EXPECT_NE(shared.find(std::string(name) + "="), std::string::npos) << name;
  }
  EXPECT_NE(shared.find("RDMACOLL_UCX_PROTOCOL=put\n"), std::string::npos) << shared;
  EXPECT_EQ(shared.find("RDMACOLL_AUTH_TOKEN"), std::string::npos) << "the secret stays local";
}

TEST(Settings, LongValuesAreCutShortInMessages) {
  const std::string huge(100000, 'x');
  EXPECT_EQ(shown(huge).size(), 61 + std::string("... (100000 bytes)").size());
  EXPECT_EQ(shown("short"), "short");
}

TEST(Settings, TheReadmeTableIsTheRegistrys) {
  std::ifstream f(README_PATH);
  std::stringstream readme;
  readme << f.rdbuf();
  const std::string table = markdown_table();
  EXPECT_NE(readme.str().find(table), std::string::npos)
      << "README.md's table of settings differs from the registry; paste `rdmacoll-run "
         "--help-env`:\n"
      << table;
  for (const Spec& s : all()) {
    if (!s.test_hook) {
      EXPECT_NE(table.find(std::string("`").append(s.name).append("`")), std::string::npos);
    }
  }
}

TEST(Settings, UnregisteredNamesAreABug) {
  EXPECT_THROW((void)spec("RDMACOLL_NO_SUCH_SETTING"), std::logic_error);
}

}  // namespace
}  // namespace rdmacoll::settings
