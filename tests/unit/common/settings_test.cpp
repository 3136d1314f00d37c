// The settings registry (common/settings): strict readers, the job-wide list, and the README's
// table, which must be the registry's own.

#include "common/settings.hpp"

#include <gtest/gtest.h>

#include <algorithm>
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
  EXPECT_EQ(read(kTransport), "auto");
  Env e("RDMACOLL_TRANSPORT", "VERBS");
  EXPECT_EQ(read(kTransport), kTransport.value("verbs"));  // case does not matter
  Env d("RDMACOLL_DEBUG", "loud");
  try {
    (void)read(kDebug);
    FAIL() << "no error";
  } catch (const InvalidArgument& x) {
    EXPECT_STREQ(x.what(), "RDMACOLL_DEBUG: expected one of warn, info, trace, got 'loud'");
  }
}

TEST(Settings, CountsKeepTheirRegisteredBounds) {
  EXPECT_EQ(read(kIbServiceLevel), 0u);
  {
    Env e("RDMACOLL_IB_SL", "16");
    EXPECT_THROW((void)read(kIbServiceLevel), InvalidArgument);
  }
  EXPECT_EQ(read(kEagerLimit), std::nullopt);  // unset: the group's shape decides
  {
    Env e("RDMACOLL_EAGER_LIMIT", std::to_string(4u << 20));
    EXPECT_EQ(read(kEagerLimit), 4u << 20);
  }
  Env e("RDMACOLL_EAGER_LIMIT", std::to_string((4u << 20) + 1));
  EXPECT_THROW((void)read(kEagerLimit), InvalidArgument);
}

// The registry is made from the constants code reads through: each one's entry has its type,
// bounds and default, so a reader and the README cannot disagree.
TEST(Settings, EveryConstantIsTheRegistrysEntryOfItsName) {
  for (const Count* c : {&kIbPort, &kGidIndex, &kSpinUs, &kEagerLimit, &kIbTrafficClass,
                         &kTestMaxMessage, &kTestQpDelayRank, &kTestSrqReceives}) {
    const Spec& s = spec(c->name);
    EXPECT_EQ(s.type, Type::Count) << c->name;
    EXPECT_EQ(s.min, c->min) << c->name;
    EXPECT_EQ(s.max, c->max) << c->name;
    EXPECT_EQ(s.default_text, c->default_text) << c->name;
  }
  for (const Text* t : {&kAuthToken, &kJobId, &kStoreBind, &kIbDevice, &kHostId, &kIbAddrFamily,
                        &kIbAddrRange, &kIbPkey}) {
    EXPECT_EQ(spec(t->name).type, Type::Text) << t->name;
    EXPECT_EQ(spec(t->name).default_text, t->default_text) << t->name;
  }
  const Spec& mtu = spec(kIbMtu.name);
  EXPECT_EQ(mtu.type, Type::Choice);
  EXPECT_TRUE(std::equal(mtu.choices.begin(), mtu.choices.end(), kIbMtu.values.begin(),
                         kIbMtu.values.end()));
  EXPECT_EQ(spec(kTimeout.name).default_text, "1800");
  EXPECT_EQ(read(kTimeout), kTimeout.value);
  size_t constants = 8 + 8 + 8 + 1;  // the counts, texts and numbers above, and the timeout
  for (std::string_view c :
       {kTransport.name, kAlgo.name, kAllToAll.name, kDescriptors.name, kTopology.name,
        kUcxProtocol.name, kPeerReads.name, kDebug.name, kIbMtu.name, kIbAdaptiveRouting.name,
        kForkInit.name, kProgress.name}) {
    EXPECT_EQ(spec(c).type, Type::Choice) << c;
    ++constants;
  }
  EXPECT_EQ(all().size(), constants) << "a registered setting without its constant";
}

// A Number's default and bounds are stated once (settings.hpp): its reader gets the default
// when unset, the registry holds its bounds, and the README's table shows both.
TEST(Settings, ANumberIsReadRegisteredAndShownWithTheOneDefaultItStates) {
  for (const Number* n : {&kIbServiceLevel, &kIbAckTimeout, &kIbRetryCount, &kIbChunk,
                          &kIbQpsPerPeer, &kIbEagerSlots, &kMrCacheMb, &kTestQpDelayMs}) {
    EXPECT_EQ(read(*n), n->value) << n->name;
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
  EXPECT_EQ(read(kIbChunk), 8192u);
}

// Numbers are plain decimals: no blanks, signs, hex or exponents, which strtod and strtoull
// would take ("0x10" s was 16 s; " 5" was 5).
TEST(Settings, NumbersAreDigitsOnly) {
  for (const char* bad : {" 5", "+5", "0x10", "1e3", "5 ", "-0", ".5", "nan"}) {
    Env e("RDMACOLL_IB_SL", bad);
    EXPECT_THROW((void)read(kIbServiceLevel), InvalidArgument) << "'" << bad << "'";
    Env t("RDMACOLL_TIMEOUT_S", bad);
    EXPECT_THROW((void)read(kTimeout), InvalidArgument) << "'" << bad << "'";
  }
  Env t("RDMACOLL_TIMEOUT_S", "2.5m");
  EXPECT_EQ(read(kTimeout).count(), 150000);
  Env e("RDMACOLL_IB_SL", "15");
  EXPECT_EQ(read(kIbServiceLevel), 15u);
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
