// `kiln ... -o` as a subprocess: a FIFO, a symlink and a regular file as -o FILE; --emit cuda -o DIR refusing
// a directory kiln did not write, keeping a user's files in its own, with a trailing slash, and `-o .`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "cli_support.h"
#include "kiln/runtime/manifest.h"
#include "kiln/support/output.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;
namespace fs = std::filesystem;

const std::string kMlp = (fs::path(KILN_SOURCE_DIR) / "models/fixtures/mlp.pt").string();

TEST(CliOutput, FileFifoAndSymlinkAreWrittenThrough) {
  TempDir tmp;
  const std::string expected = kiln({"compile", kMlp, "--ir", "tensor"}).out;
  ASSERT_FALSE(expected.empty());

  fs::path fifo = tmp.path / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto reader = std::async(std::launch::async, [&] { return readFile(fifo); });
  Result r = kiln({"compile", kMlp, "--ir", "tensor", "-o", fifo.string()});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(reader.get(), expected);
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));

  std::ofstream(tmp.path / "target.txt") << "old\n";
  fs::create_symlink("target.txt", tmp.path / "link.txt");
  r = kiln({"compile", kMlp, "--ir", "tensor", "-o", "link.txt"}, tmp.path);
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(fs::is_symlink(tmp.path / "link.txt"));
  EXPECT_EQ(readFile(tmp.path / "target.txt"), expected);

  std::ofstream(tmp.path / "plain.txt") << "old\n";
  r = kiln({"compile", kMlp, "--ir", "tensor", "-o", "plain.txt"}, tmp.path);
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(readFile(tmp.path / "plain.txt"), expected);
  EXPECT_EQ(listDir(tmp.path), (std::vector<std::string>{"link.txt", "pipe", "plain.txt", "target.txt"}));
}

TEST(CliOutput, EmitRefusesAnOldUnmarkedOutputAndKeepsIt) {
  TempDir tmp;
  fs::path dir = tmp.path / "old";
  fs::create_directories(dir);
  std::ofstream(dir / runtime::kManifestFileName) << "{}";
  std::ofstream(dir / "k.cu") << "mine\n";
  expectOneLineError(kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", dir.string()}), 1,
                     {dir.string(), "kiln did not write", kMarkerFileName, "new or empty directory"});
  EXPECT_EQ(listDir(dir), (std::vector<std::string>{"k.cu", "manifest.json"}));
  EXPECT_EQ(readFile(dir / "k.cu"), "mine\n");
}

TEST(CliOutput, EmitWithTrailingSlashThenAgainKeepsTheUsersFile) {
  TempDir tmp;
  Result r = kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", "out/"}, tmp.path);
  ASSERT_EQ(r.code, 0) << describe(r);
  fs::path out = tmp.path / "out";
  EXPECT_EQ(listDir(tmp.path), std::vector<std::string>{"out"});
  std::set<std::string> first = readMarker(out.string());
  EXPECT_TRUE(first.count(runtime::kManifestFileName));
  EXPECT_EQ(runtime::readManifest(out).model, "mlp");

  std::ofstream(out / "notes.txt") << "my notes\n";
  r = kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", "out"}, tmp.path);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(readFile(out / "notes.txt"), "my notes\n");
  EXPECT_EQ(readMarker(out.string()), first);
  std::set<std::string> names;
  for (auto& n : listDir(out)) names.insert(n);
  std::set<std::string> expected = first;
  expected.insert({kMarkerFileName, "notes.txt"});
  EXPECT_EQ(names, expected) << "a staging directory or temporary was left behind";
}

TEST(CliOutput, EmitIntoDotRefusedInAForeignDirectoryAndWorksInAnEmptyOne) {
  TempDir tmp;
  std::ofstream(tmp.path / "notes.txt") << "keep me\n";
  expectOneLineError(kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", "."}, tmp.path), 1,
                     {"'.'", "kiln did not write"});
  EXPECT_EQ(listDir(tmp.path), std::vector<std::string>{"notes.txt"});

  fs::path empty = tmp.path / "empty";
  fs::create_directories(empty);
  for (int i = 0; i < 2; ++i) {
    Result r = kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", "."}, empty);
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_TRUE(fs::is_directory(empty));
    EXPECT_TRUE(fs::exists(empty / runtime::kManifestFileName));
  }
}

// The working directory lies inside the output directory: neither is removed, nor the user's directory.
TEST(CliOutput, EmitIntoAnAncestorOfTheWorkingDirectory) {
  TempDir tmp;
  fs::path out = tmp.path / "out";
  ASSERT_EQ(kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", out.string()}).code, 0);
  fs::create_directories(out / "sub");
  std::ofstream(out / "sub" / "work.txt") << "work\n";
  Result r = kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", ".."}, out / "sub");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(readFile(out / "sub" / "work.txt"), "work\n");
  EXPECT_TRUE(fs::exists(out / runtime::kManifestFileName));
}

}  // namespace
}  // namespace kiln
