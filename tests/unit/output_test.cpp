// kiln/support/output.h: -o FILE writes through to a FIFO or a symlink's target and replaces only regular
// files; -o DIR writes only into new, empty or kiln-marked directories and replaces only kiln's own files.
#include "kiln/support/output.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <sstream>

#include "cli_support.h"
#include "kiln/support/error.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using test::cli::listDir;
using test::cli::readFile;
namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// The pid of a process that has exited (and been reaped): what a killed kiln run leaves in its temporaries.
pid_t deadPid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

std::string userErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// ---- -o FILE ----

TEST(OutputFile, NewFileLeavesNoTemporary) {
  TempDir tmp;
  writeOutputFile((tmp.path / "out.txt").string(), "hello\n");
  EXPECT_EQ(readFile(tmp.path / "out.txt"), "hello\n");
  EXPECT_EQ(listDir(tmp.path), std::vector<std::string>{"out.txt"});
}

TEST(OutputFile, RegularFileReplacedKeepingItsMode) {
  TempDir tmp;
  fs::path p = tmp.path / "out.txt";
  put(p, "a much longer old text\n");
  ASSERT_EQ(chmod(p.c_str(), 0640), 0);
  writeOutputFile(p.string(), "new\n");
  EXPECT_EQ(readFile(p), "new\n");
  struct stat st;
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(listDir(tmp.path), std::vector<std::string>{"out.txt"});
}

TEST(OutputFile, SymlinkStaysAndItsTargetIsWritten) {
  TempDir tmp;
  fs::create_directories(tmp.path / "real");
  put(tmp.path / "real" / "target.txt", "old\n");
  fs::create_symlink("real/target.txt", tmp.path / "link.txt");
  writeOutputFile((tmp.path / "link.txt").string(), "through the link\n");
  EXPECT_TRUE(fs::is_symlink(tmp.path / "link.txt"));
  EXPECT_EQ(fs::read_symlink(tmp.path / "link.txt"), "real/target.txt");
  EXPECT_EQ(readFile(tmp.path / "real" / "target.txt"), "through the link\n");
  EXPECT_EQ(listDir(tmp.path / "real"), std::vector<std::string>{"target.txt"});

  fs::create_symlink("real/not-yet.txt", tmp.path / "dangling.txt");  // creates the file the link names
  writeOutputFile((tmp.path / "dangling.txt").string(), "created\n");
  EXPECT_TRUE(fs::is_symlink(tmp.path / "dangling.txt"));
  EXPECT_EQ(readFile(tmp.path / "real" / "not-yet.txt"), "created\n");
}

TEST(OutputFile, FifoIsWrittenThroughNotReplaced) {
  TempDir tmp;
  fs::path fifo = tmp.path / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink("pipe", tmp.path / "pipe-link");
  std::string text(200000, 'x');  // more than a pipe buffer: the writer must wait for the reader
  for (const char* name : {"pipe", "pipe-link"}) {
    auto reader = std::async(std::launch::async, [&] { return readFile(fifo); });
    writeOutputFile((tmp.path / name).string(), text);
    EXPECT_EQ(reader.get(), text) << name;
    EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo))) << name;
  }
  EXPECT_EQ(listDir(tmp.path), (std::vector<std::string>{"pipe", "pipe-link"}));
}

TEST(OutputFile, DirectoryOrTrailingSlashRefused) {
  TempDir tmp;
  EXPECT_NE(userErrorOf([&] { writeOutputFile(tmp.path.string(), "x"); }).find("is a directory"), std::string::npos);
  EXPECT_NE(userErrorOf([&] { writeOutputFile((tmp.path / "f.txt").string() + "/", "x"); }).find("ends in '/'"),
            std::string::npos);
  EXPECT_TRUE(listDir(tmp.path).empty());
}

TEST(OutputFile, SymlinkToADirectoryRefused) {
  TempDir tmp;
  fs::create_directories(tmp.path / "d");
  fs::create_symlink("d", tmp.path / "link");
  std::string err = userErrorOf([&] { writeOutputFile((tmp.path / "link").string(), "x"); });
  EXPECT_NE(err.find("symlink to a directory"), std::string::npos) << err;
  EXPECT_TRUE(listDir(tmp.path / "d").empty());
}

TEST(OutputFile, LeftoverTemporaryOfAKilledRunIsHarmless) {
  TempDir tmp;
  std::string leftover = fmt::format(".out.txt.kiln-tmp-{}-7", deadPid());
  put(tmp.path / leftover, "partial");
  writeOutputFile((tmp.path / "out.txt").string(), "ok\n");
  EXPECT_EQ(readFile(tmp.path / "out.txt"), "ok\n");
}

// ---- -o DIR ----

// Writes `files` (name -> text) as one output into `dir`, as writeArtifacts does.
void emit(const fs::path& dir, const std::map<std::string, std::string>& files) {
  OutputDir out(dir.string());
  for (auto& [name, text] : files) put(fs::path(out.staging()) / name, text);
  out.commit("manifest.json");
}

TEST(OutputDir, NewDirectoryWithParentsGetsTheMarker) {
  TempDir tmp;
  fs::path dir = tmp.path / "a" / "b";
  emit(dir, {{"manifest.json", "{}"}, {"k.cu", "code"}});
  EXPECT_EQ(listDir(dir), (std::vector<std::string>{".kiln-output", "k.cu", "manifest.json"}));
  EXPECT_EQ(readMarker(dir.string()), (std::set<std::string>{"k.cu", "manifest.json"}));
  EXPECT_EQ(readFile(dir / ".kiln-output").rfind("kiln-output 1\n", 0), 0u);
}

TEST(OutputDir, ForeignNonEmptyDirectoryRefusedAndUntouched) {
  TempDir tmp;
  put(tmp.path / "notes.txt", "mine\n");
  put(tmp.path / "manifest.json", "{}");  // looks like a kiln output, but kiln did not mark it
  std::string err = userErrorOf([&] { OutputDir out(tmp.path.string()); });
  EXPECT_NE(err.find(tmp.path.string()), std::string::npos) << err;
  EXPECT_NE(err.find("non-empty directory that kiln did not write"), std::string::npos) << err;
  EXPECT_NE(err.find("new or empty directory"), std::string::npos) << err;
  EXPECT_EQ(listDir(tmp.path), (std::vector<std::string>{"manifest.json", "notes.txt"}));
  EXPECT_EQ(readFile(tmp.path / "notes.txt"), "mine\n");
}

TEST(OutputDir, ReEmitReplacesOnlyKilnsFiles) {
  TempDir tmp;
  fs::path dir = tmp.path / "out";
  emit(dir, {{"manifest.json", "v1"}, {"old.cu", "gone soon"}, {"k.cu", "v1"}});
  put(dir / "README.user", "my notes\n");
  fs::create_directories(dir / "user-dir");
  emit(dir, {{"manifest.json", "v2"}, {"k.cu", "v2"}, {"new.cu", "v2"}});
  EXPECT_EQ(listDir(dir),
            (std::vector<std::string>{".kiln-output", "README.user", "k.cu", "manifest.json", "new.cu", "user-dir"}));
  EXPECT_EQ(readFile(dir / "k.cu"), "v2");
  EXPECT_EQ(readFile(dir / "README.user"), "my notes\n");
  EXPECT_EQ(readMarker(dir.string()), (std::set<std::string>{"k.cu", "manifest.json", "new.cu"}));
}

TEST(OutputDir, UsersFileWithAKilnNameRefusedBeforeAnythingMoves) {
  TempDir tmp;
  emit(tmp.path, {{"manifest.json", "v1"}});
  put(tmp.path / "k.cu", "the user's own k.cu\n");
  std::string err = userErrorOf([&] { emit(tmp.path, {{"manifest.json", "v2"}, {"k.cu", "kiln's"}}); });
  EXPECT_NE(err.find("'k.cu'"), std::string::npos) << err;
  EXPECT_EQ(readFile(tmp.path / "k.cu"), "the user's own k.cu\n");
  EXPECT_EQ(readFile(tmp.path / "manifest.json"), "v1");
  EXPECT_EQ(listDir(tmp.path), (std::vector<std::string>{".kiln-output", "k.cu", "manifest.json"}));
}

TEST(OutputDir, TrailingSlashesAccepted) {
  TempDir tmp;
  fs::path dir = tmp.path / "out";
  OutputDir out(dir.string() + "//");
  EXPECT_EQ(out.path(), dir.string());
  put(fs::path(out.staging()) / "manifest.json", "{}");
  out.commit();
  EXPECT_EQ(listDir(tmp.path), std::vector<std::string>{"out"});
  EXPECT_EQ(listDir(dir), (std::vector<std::string>{".kiln-output", "manifest.json"}));
}

TEST(OutputDir, FailureTakesBackADirectoryItCreatedButNotAnExistingOne) {
  TempDir tmp;
  { OutputDir out((tmp.path / "new" / "deeper").string()); }  // never committed (an nvcc error, say)
  EXPECT_TRUE(listDir(tmp.path).empty());

  emit(tmp.path / "kept", {{"manifest.json", "v1"}});
  {
    OutputDir out((tmp.path / "kept").string());
    put(fs::path(out.staging()) / "manifest.json", "v2");
  }
  EXPECT_EQ(listDir(tmp.path / "kept"), (std::vector<std::string>{".kiln-output", "manifest.json"}));
  EXPECT_EQ(readFile(tmp.path / "kept" / "manifest.json"), "v1");
}

TEST(OutputDir, LeftoversOfAKilledRunAreCleanedAndDoNotBlock) {
  TempDir tmp;
  pid_t dead = deadPid();
  // Killed before its marker was written: a directory with nothing but kiln's temporaries counts as empty.
  fs::path fresh = tmp.path / "fresh";
  fs::create_directories(fresh / fmt::format(".kiln-tmp-{}-1", dead));
  put(fresh / fmt::format("..kiln-output.kiln-tmp-{}-2", dead), "partial");
  emit(fresh, {{"manifest.json", "{}"}});
  EXPECT_EQ(listDir(fresh), (std::vector<std::string>{".kiln-output", "manifest.json"}));
  // Killed after: its staging directory inside a marked directory.
  fs::create_directories(fresh / fmt::format(".kiln-tmp-{}-3", dead));
  put(fresh / fmt::format(".kiln-tmp-{}-3", dead) / "k.cu", "half written");
  emit(fresh, {{"manifest.json", "v2"}});
  EXPECT_EQ(listDir(fresh), (std::vector<std::string>{".kiln-output", "manifest.json"}));
  // Before the marker, kiln staged a new directory next to it as .NAME.kiln-tmp-N: it does not block either
  // (and, with no process id to tell whether its run still goes on, stays).
  fs::path old = tmp.path / "old";
  fs::create_directories(old / ".out.kiln-tmp-123456" / "k.cu");
  emit(old, {{"manifest.json", "{}"}});
  EXPECT_EQ(listDir(old), (std::vector<std::string>{".kiln-output", ".out.kiln-tmp-123456", "manifest.json"}));
}

TEST(OutputDir, MarkerOfANewerFormatOrUnreadableRefused) {
  TempDir tmp;
  put(tmp.path / ".kiln-output", "kiln-output 99\nmanifest.json\n");
  put(tmp.path / "manifest.json", "theirs");
  std::string err = userErrorOf([&] { OutputDir out(tmp.path.string()); });
  EXPECT_NE(err.find("newer kiln"), std::string::npos) << err;
  put(tmp.path / ".kiln-output", "something else\n");
  err = userErrorOf([&] { OutputDir out(tmp.path.string()); });
  EXPECT_NE(err.find("not a marker"), std::string::npos) << err;
  EXPECT_EQ(readFile(tmp.path / "manifest.json"), "theirs");
}

TEST(OutputDir, MarkerNamesOutsideTheDirectoryAreIgnored) {
  TempDir tmp;
  put(tmp.path / "precious", "keep\n");
  fs::create_directories(tmp.path / "out");
  put(tmp.path / "out" / ".kiln-output", "kiln-output 1\n../precious\n/etc/passwd\n.\n..\n");
  emit(tmp.path / "out", {{"manifest.json", "{}"}});
  EXPECT_EQ(readFile(tmp.path / "precious"), "keep\n");
  EXPECT_EQ(readMarker((tmp.path / "out").string()), std::set<std::string>{"manifest.json"});
}

TEST(OutputDir, DirectoryThatCannotBeCreatedRefused) {
  std::string err = userErrorOf([&] { OutputDir out("/proc/nope/out"); });
  EXPECT_NE(err.find("cannot create '/proc/nope'"), std::string::npos) << err;
}

TEST(OutputDir, FileInTheWayRefused) {
  TempDir tmp;
  put(tmp.path / "out", "a file\n");
  std::string err = userErrorOf([&] { OutputDir out((tmp.path / "out").string()); });
  EXPECT_NE(err.find("is not a directory"), std::string::npos) << err;
  EXPECT_EQ(readFile(tmp.path / "out"), "a file\n");
}

}  // namespace
}  // namespace kiln
