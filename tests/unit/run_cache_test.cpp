// The key of `kiln run`'s compile cache: computed before compiling, from the model file and the command line.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "kiln/driver/run_cache.h"
#include "kiln/runtime/manifest.h"
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
  EXPECT_NE(d, changed([](RunCacheKey& k) { k.productShapes = R"({"products": []})"; }));
  write("second content");  // a re-exported model with other weights
  EXPECT_NE(d, runCacheDir(base));
}

// An entry is used as it is only when its manifest reads and every file it lists has the size and hash kiln wrote;
// a damaged one is reported and removed (so kiln run compiles it again into a fresh directory: issue 45's stuck cache,
// where an entry that had lost its .kiln-output marker failed every run with the -o rules' message), an absent one is
// just absent.
TEST_F(RunCacheTest, ADamagedEntryIsReportedAndRemoved) {
  std::filesystem::path entry = dir.path / "cache" / "tiny-0123456789abcdef";
  std::string damage = "stale";
  EXPECT_FALSE(usableCacheEntry(entry, &damage));
  EXPECT_EQ(damage, "");
  auto writeEntry = [&] {
    std::filesystem::create_directories(entry);
    std::ofstream(entry / "weights.bin", std::ios::binary) << std::string(256, 'w');
    std::ofstream(entry / "k0.cubin", std::ios::binary) << "cubin";
    runtime::Manifest m;
    m.kilnVersion = "test";
    m.model = "tiny";
    m.arch = "sm_90a";
    m.arenaBytes = 256;
    runtime::BufferInfo y;
    y.name = "y";
    y.kind = runtime::BufferKind::Output;
    y.shape = {64};
    y.bytes = 256;
    m.buffers = {y};
    m.outputs = {0};
    runtime::KernelInfo k;
    k.name = k.entry = "k0";
    k.source = "k0.cu";
    k.cubin = "k0.cubin";
    k.params = {0};
    m.kernels = {k};
    m.files = {runtime::describeFile(entry, "weights.bin"), runtime::describeFile(entry, "k0.cubin")};
    runtime::writeManifest(m, entry);
  };
  auto expectRemovedFor = [&](const std::string& why) {
    EXPECT_FALSE(usableCacheEntry(entry, &damage));
    EXPECT_NE(damage.find(why), std::string::npos) << damage;
    EXPECT_FALSE(std::filesystem::exists(entry)) << "a damaged entry is removed, to be written again";
  };
  writeEntry();
  EXPECT_TRUE(usableCacheEntry(entry, &damage)) << damage;
  EXPECT_EQ(damage, "");
  std::ofstream(entry / "weights.bin", std::ios::binary) << std::string(100, 'w');  // a killed write
  expectRemovedFor("weights.bin: changed after kiln wrote it (100 bytes");
  writeEntry();
  std::ofstream(entry / "manifest.json", std::ios::binary) << "{ truncated";
  expectRemovedFor("malformed JSON");
  std::filesystem::create_directories(entry);  // a directory of other files (no manifest, no marker)
  std::ofstream(entry / "stray.txt") << "x";
  expectRemovedFor("it has no manifest.json");
  std::ofstream(entry) << "a file where the entry's directory goes";
  expectRemovedFor("it is not a directory");
  std::filesystem::create_directories(entry);  // an empty directory: nothing cached yet, nothing to report
  EXPECT_FALSE(usableCacheEntry(entry, &damage));
  EXPECT_EQ(damage, "");
}

TEST_F(RunCacheTest, AMissingModelIsAUserError) {
  RunCacheKey key{(dir.path / "missing.pt").string(), {}, "", "sm_90"};
  EXPECT_THROW(runCacheDir(key), UserError);
}

// Two kilns running one model at once compile it once: the second lock on the entry waits until the first is released
// (the first compiled and wrote the entry meanwhile), saying so once. Here two open descriptions of the lock file in
// one process, which flock(2) treats as two holders.
TEST_F(RunCacheTest, ASecondLockOnAnEntryWaitsForTheFirst) {
  const auto entry = runCacheDir(RunCacheKey{model, {}, "", "sm_90a"});
  std::ostringstream firstLog, secondLog;
  auto first = std::make_unique<CacheEntryLock>(entry, firstLog);
  EXPECT_TRUE(std::filesystem::exists(entry.string() + ".lock"));
  std::atomic<bool> acquired{false};
  std::thread second([&] {
    CacheEntryLock lock(entry, secondLog);
    acquired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(acquired) << "the second lock was granted while the first was held";
  first.reset();
  second.join();
  EXPECT_TRUE(acquired);
  EXPECT_EQ(firstLog.str(), "");
  EXPECT_EQ(secondLog.str(), "kiln: waiting for another kiln compiling into the cache " + entry.string() + "\n");
  CacheEntryLock again(entry, firstLog);  // free again: granted at once, without a word
  EXPECT_EQ(firstLog.str(), "");
}

}  // namespace
}  // namespace kiln
