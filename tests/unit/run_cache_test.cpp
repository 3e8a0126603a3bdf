// The key of `kiln run`'s compile cache: computed before compiling, from the model file and the command line.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "kiln/driver/run_cache.h"
#include "kiln/support/error.h"
#include "test_support.h"

namespace kiln {
namespace {

struct RunCacheTest : ::testing::Test {
  test::TempDir dir;
  std::string model = (dir.path / "tiny.pt").string();
  void SetUp() override {
    setenv("KILN_CACHE_DIR", (dir.path / "cache").c_str(), 1);
    write("first content");
  }
  void TearDown() override { unsetenv("KILN_CACHE_DIR"); }
  void write(const std::string& text) { std::ofstream(model, std::ios::binary) << text; }
};

TEST_F(RunCacheTest, SameModelAndCommandLineGiveTheSameEntryUnderKilnCacheDir) {
  RunCacheKey key{model, {"x=2x8:f32"}, "bf16", "sm_90"};
  auto d = runCacheDir(key);
  EXPECT_EQ(d, runCacheDir(key));
  EXPECT_EQ(d.parent_path(), dir.path / "cache");
  EXPECT_EQ(d.filename().string().rfind("tiny-", 0), 0u) << d;
}

TEST_F(RunCacheTest, EveryFieldOfTheKeyChangesTheEntry) {
  RunCacheKey base{model, {"x=2x8:f32"}, "", "sm_90"};
  auto d = runCacheDir(base);
  auto changed = [&](auto edit) {
    RunCacheKey k = base;
    edit(k);
    return runCacheDir(k);
  };
  EXPECT_NE(d, changed([](RunCacheKey& k) { k.inputOverrides = {"x=4x8:f32"}; }));
  EXPECT_NE(d, changed([](RunCacheKey& k) { k.inputOverrides = {}; }));
  EXPECT_NE(d, changed([](RunCacheKey& k) { k.dtype = "bf16"; }));
  EXPECT_NE(d, changed([](RunCacheKey& k) { k.arch = "sm_80"; }));
  EXPECT_NE(d, changed([](RunCacheKey& k) { k.passChoices = {"+tile-tiled-contractions"}; }));
  write("second content");  // a re-exported model with other weights
  EXPECT_NE(d, runCacheDir(base));
}

TEST_F(RunCacheTest, AMissingModelIsAUserError) {
  RunCacheKey key{(dir.path / "missing.pt").string(), {}, "", "sm_90"};
  EXPECT_THROW(runCacheDir(key), UserError);
}

}  // namespace
}  // namespace kiln
