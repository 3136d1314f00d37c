#include <gtest/gtest.h>

#include <cstdlib>

#include "bootstrap/init_method.hpp"
#include "bootstrap/pmix.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {
namespace {

class InitMethodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars)
      unsetenv(v);
  }
  void TearDown() override { SetUp(); }
  static constexpr const char* kVars[] = {
      "MASTER_ADDR",          "MASTER_PORT",          "RANK",           "WORLD_SIZE",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",       "PMI_SIZE",
      "SLURM_PROCID",         "SLURM_NTASKS",         "PMIX_NAMESPACE", "PMIX_RANK"};
};

TEST_F(InitMethodTest, EnvTorchrunStyle) {
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "29500", 1);
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  InitTarget r = resolve_init_method("env://", -1, -1);
  EXPECT_EQ(r.master_addr, "10.1.2.3");
  EXPECT_EQ(r.master_port, 29500);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 8);
}

TEST_F(InitMethodTest, OpenMpiAndSlurmVariables) {
  setenv("MASTER_ADDR", "h0", 1);
  setenv("MASTER_PORT", "1234", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  InitTarget r = resolve_init_method("env://", -1, -1);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 2);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "6", 1);
  r = resolve_init_method("env://", -1, -1);
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.world_size, 6);
}

// Under mpirun or srun --mpi=pmix with nothing set, the ranks meet through the launcher's PMIx
// server; a MASTER_ADDR (torchrun inside an allocation) keeps the store.
TEST_F(InitMethodTest, APmixLauncherWithNoMasterAddrMeetsThroughPmixAndMasterAddrWins) {
  EXPECT_TRUE(resolve_init_method("pmix://", -1, -1).pmix);
  setenv("PMIX_NAMESPACE", "job-1", 1);
  setenv("PMIX_RANK", "2", 1);
  if (pmix_built_in()) {
    EXPECT_TRUE(resolve_init_method("env://", -1, -1).pmix);
  } else {
    EXPECT_THROW(resolve_init_method("env://", -1, -1), InvalidArgument);
  }
  setenv("MASTER_ADDR", "h0", 1);
  setenv("MASTER_PORT", "1234", 1);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  const InitTarget r = resolve_init_method("env://", -1, -1);
  EXPECT_FALSE(r.pmix);
  EXPECT_EQ(r.master_addr, "h0");
}

TEST_F(InitMethodTest, PmixAskedForWithNoLauncherSaysHowToLaunch) {
  try {
    PmixSession::connect("init_process_group");
    FAIL() << "connected with no launcher";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(pmix_built_in() ? "mpirun" : "no PMIx support"), std::string::npos) << m;
  }
}

TEST_F(InitMethodTest, TcpWithExplicitRank) {
  InitTarget r = resolve_init_method("tcp://127.0.0.1:4000", 1, 4);
  EXPECT_EQ(r.master_addr, "127.0.0.1");
  EXPECT_EQ(r.master_port, 4000);
  EXPECT_EQ(r.rank, 1);
}

TEST_F(InitMethodTest, ClearErrors) {
  try {
    resolve_init_method("env://", -1, -1);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos);
  }
  EXPECT_THROW(resolve_init_method("tcp://host", 0, 1), InvalidArgument);
  EXPECT_THROW(resolve_init_method("file:///tmp/x", 0, 1), InvalidArgument);
  EXPECT_THROW(resolve_init_method("tcp://h:99999", 0, 1), InvalidArgument);
  try {
    resolve_init_method("tcp://h:1", 4, 4);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 4 is out of range for world size 4"),
              std::string::npos);
  }
  setenv("MASTER_ADDR", "h", 1);
  setenv("MASTER_PORT", "12x", 1);
  EXPECT_THROW(resolve_init_method("env://", 0, 1), InvalidArgument);
}

}  // namespace
}  // namespace rdmacoll::bootstrap
