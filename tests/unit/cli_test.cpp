// The `kiln` command line, run as a subprocess: exit codes (0 ok, 1 user error, 2 usage error), the one-line
// "kiln: error: ..." messages, that failures leave nothing behind, and the debugging flags.
#include <gtest/gtest.h>

#include "cli_support.h"
#include "kiln/support/output.h"
#include "test_support.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/cuda/emitter.h"
#include "kiln/runtime/manifest.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"
#include "kiln/support/target.h"
#include "kiln/support/files.h"
#include "kiln/support/pipeline.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;
namespace fs = std::filesystem;

const std::string kMlp = "models/fixtures/mlp.pt";  // tests run with the repository root as working directory

// ---- errors ----

// --version: kiln's version and commit, the LibTorch and CUDA it was built with, the manifest format it writes.
TEST(Cli, VersionNamesTheBuild) {
  Result r = kiln({"--version"});
  EXPECT_EQ(r.code, 0) << describe(r);
  const std::string format = fmt::format("manifest format {}", runtime::kManifestFormatVersion);
  for (const std::string& part : {std::string("kiln 0.1.0 (commit "), std::string("LibTorch 2.11.0"), std::string("CUDA 13.0"), format})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << describe(r);
}

// kiln run DIR (an emitted directory): what cannot apply to it is refused with one line before any work.
TEST(Cli, RunEmittedDirectoryRefusesWhatCannotApply) {
  test::TempDir tmp;
  fs::path out = tmp.path / "out";
  Result emit = kiln({"compile", kMlp, "--emit", "cuda", "-o", out.string(), "--no-nvcc"});
  ASSERT_EQ(emit.code, 0) << describe(emit);
  expectOneLineError(kiln({"run", out.string(), "--interpret"}), 2, {"--interpret", "emitted directory"});
  expectOneLineError(kiln({"run", out.string(), "--check"}), 2, {"--check", "--reference MODEL.pt"});
  expectOneLineError(kiln({"run", out.string(), "--input", "x=1x8x64"}), 2, {out.string(), "fixed input shapes"});
  expectOneLineError(kiln({"run", kMlp, "--reference", kMlp}), 2, {"--reference", "not a directory"});
  expectOneLineError(kiln({"run", tmp.path.string()}), 1, {"without manifest.json", "--emit cuda"});
  if (!runtime::gpuAvailable())
    expectOneLineError(kiln({"run", out.string()}), 1, {"needs a CUDA GPU to run an emitted directory"});
}

// --save-io DIR: the inputs and outputs as raw bytes in the model's dtypes; never into a directory with files in it.
TEST(Cli, SaveIoWritesRawBytesIntoANewDirectory) {
  test::TempDir tmp;
  fs::path io = tmp.path / "io";
  Result r = kiln({"run", kMlp, "--interpret", "--save-io", io.string()});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(fs::file_size(io / "input0.bin"), 1u * 8 * 64 * 4);
  EXPECT_EQ(fs::file_size(io / "output0.bin"), 1u * 8 * 64 * 4);
  EXPECT_NE(r.out.find(" fnv1a "), std::string::npos) << describe(r);
  expectOneLineError(kiln({"run", kMlp, "--interpret", "--save-io", io.string()}), 1, {"--save-io", "new or empty"});
}

// --inputs DIR reads the inputs --save-io wrote: the same bytes give the same outputs, and --check compares LibTorch on
// them; files of another shape, a missing file, a file too many and a path that is no directory are one line each.
TEST(Cli, InputsFromADirectoryGiveTheSavedRun) {
  test::TempDir tmp;
  const fs::path first = tmp.path / "first", second = tmp.path / "second", empty = tmp.path / "empty";
  ASSERT_EQ(kiln({"run", kMlp, "--interpret", "--seed", "3", "--save-io", first.string()}).code, 0);
  Result again = kiln({"run", kMlp, "--interpret", "--inputs", first.string(), "--save-io", second.string(), "--check"});
  expectCheckPasses(again);
  EXPECT_EQ(readFile(first / "output0.bin"), readFile(second / "output0.bin"));
  EXPECT_EQ(readFile(first / "input0.bin"), readFile(second / "input0.bin"));
  expectOneLineError(kiln({"run", kMlp, "--interpret", "--inputs", first.string(), "--input", "x=2x8x64"}), 1,
                     {"input0.bin holds 2048 bytes", "f32[2x8x64], 4096 bytes"});
  fs::create_directories(empty);
  expectOneLineError(kiln({"run", kMlp, "--interpret", "--inputs", empty.string()}), 1, {"no input0.bin for input 0"});
  fs::copy_file(first / "input0.bin", first / "input1.bin");
  expectOneLineError(kiln({"run", kMlp, "--interpret", "--inputs", first.string()}), 1,
                     {"holds input1.bin", "takes 1 input(s)"});
  expectOneLineError(kiln({"run", kMlp, "--interpret", "--inputs", (tmp.path / "none").string()}), 2, {"not a directory"});
}

// The progress line: on a terminal (script(1) gives kiln one) it names the passes and counts nvcc's kernels; with
// KILN_PROGRESS=0, or stderr not a terminal (every other test here), there is none.
TEST(Cli, ProgressLineOnlyOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) is not installed";
  test::TempDir tmp;
  auto onTerminal = [&](const std::string& env, const std::string& out) {
    fs::path log = tmp.path / (out + ".log");
    std::string cmd = fmt::format("cd {} && {} script -qec '{} compile {} --emit cuda -o {}' {} >/dev/null 2>&1",
                                  KILN_SOURCE_DIR, env, KILN_BINARY, kMlp, (tmp.path / out).string(), log.string());
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string shown = onTerminal("", "a");
  EXPECT_NE(shown.find("kiln: tile-lower-from-loop ("), std::string::npos) << shown;
  EXPECT_NE(shown.find(" passes, "), std::string::npos) << shown;
  EXPECT_NE(shown.find("kiln: nvcc "), std::string::npos) << shown;
  EXPECT_NE(shown.find("/2 kernels"), std::string::npos) << shown;
  std::string quiet = onTerminal("KILN_PROGRESS=0", "b");
  EXPECT_EQ(quiet.find("kiln: nvcc "), std::string::npos) << quiet;
  EXPECT_NE(quiet.find("kiln: wrote 2 kernels"), std::string::npos) << quiet;
  Result piped = kiln({"compile", kMlp, "--emit", "cuda", "-o", (tmp.path / "c").string()});
  EXPECT_EQ(piped.err, "") << describe(piped);
}

TEST(Cli, MissingModelFile) {
  expectOneLineError(kiln({"compile", "models/fixtures/no_such_model.pt"}), 1, {"no_such_model.pt", "not found"});
  // A newline or an escape in an argument is shown as \xHH: the error stays one line, and prints no control byte.
  Result odd = kiln({"compile", "models/fixtures/no\nsuch\x1b[2Jmodel.pt"});
  expectOneLineError(odd, 1, {"no\\x0asuch\\x1b[2Jmodel.pt", "not found"});
  Result oddRun = kiln({"run", "no\nsuch_dir", "--input", "x\n=1"});
  EXPECT_EQ(std::count(oddRun.err.begin(), oddRun.err.end(), '\n'), 1) << describe(oddRun);
  // A report quoting a model's names (kiln inspect) shows their control bytes as \xHH too.
  TempDir tmp;
  const fs::path odd_model = tmp.path / "lin\x1b[2Jear.pt";
  fs::copy_file(test::fixturePath("linear"), odd_model);
  Result inspect = kiln({"inspect", odd_model.string()});
  EXPECT_EQ(inspect.code, 0) << describe(inspect);
  EXPECT_EQ(inspect.out.find('\x1b'), std::string::npos) << describe(inspect);
  EXPECT_NE(inspect.out.find("lin\\x1b[2Jear"), std::string::npos) << describe(inspect);
}

TEST(Cli, FileThatIsNotTorchScript) {
  TempDir tmp;
  fs::path p = tmp.path / "garbage.pt";
  std::ofstream(p) << "this is not a zip archive\n";
  expectOneLineError(kiln({"compile", p.string()}), 1, {"garbage.pt", "not a readable TorchScript"});
}

TEST(Cli, TruncatedArchive) {
  TempDir tmp;
  std::string bytes = readFile(fs::path(KILN_SOURCE_DIR) / kMlp);
  ASSERT_GT(bytes.size(), 1000u);
  fs::path p = tmp.path / "truncated.pt";
  std::ofstream(p, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expectOneLineError(kiln({"compile", p.string()}), 1, {"truncated.pt"});
}

TEST(Cli, UnsupportedOpNamesOpAndDocsAndSourceLine) {
  if (std::system("python3 -c 'import torch' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 with torch not available";
  TempDir tmp;
  fs::path model = tmp.path / "cumprod.pt";
  std::string script = fmt::format(
      "import sys, torch\n"
      "sys.path.insert(0, '{}')\n"
      "from kiln_export import export\n"
      "class CumProd(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        return torch.cumprod(x * 2.0, -1)\n"
      "export(CumProd(), {{'x': torch.randn(2, 8)}}, '{}')\n",
      (fs::path(KILN_SOURCE_DIR) / "models").string(), model.string());
  fs::path py = tmp.path / "make_cumprod.py";
  std::ofstream(py) << script;
  ASSERT_EQ(std::system(("python3 " + quote(py.string()) + " >/dev/null 2>&1").c_str()), 0) << script;
  ASSERT_TRUE(fs::exists(model));
  Result r = kiln({"compile", model.string()});
  expectOneLineError(r, 1, {"aten::cumprod", "docs/ops.md"});
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"([\w.]+\.py:\d+)"))) << "no file:line\n" << describe(r);
}

TEST(Cli, MalformedInputOverride) {
  expectOneLineError(kiln({"compile", kMlp, "--input", "x=2xZ"}), 2, {"--input", "x=2xZ"});
}

TEST(Cli, InputOverrideNamingUnknownInput) {
  expectOneLineError(kiln({"compile", kMlp, "--input", "nosuch=1x8x64"}), 2, {"nosuch"});
}

TEST(Cli, InputOverrideWithShapeTheModelCannotRun) {
  expectOneLineError(kiln({"compile", kMlp, "--input", "x=3x5"}), 1, {"--input"});
}

TEST(Cli, UnknownIrLevel) {
  expectOneLineError(kiln({"compile", kMlp, "--ir", "assembly"}), 2, {"assembly", "loop"});
}

TEST(Cli, UnknownPassName) {
  expectOneLineError(kiln({"compile", kMlp, "--print-after", "loop-fuse-everything"}), 2,
                     {"loop-fuse-everything", "kiln passes"});
  expectOneLineError(kiln({"compile", kMlp, "--stop-after", "no-such-pass"}), 2, {"no-such-pass"});
}

TEST(Cli, UnwritableOutputFile) {
  Result r = kiln({"compile", kMlp, "-o", "/proc/nope/out.txt"});
  expectOneLineError(r, 1, {"/proc/nope/out.txt"});
  EXPECT_TRUE(r.out.empty()) << describe(r);

  TempDir tmp;
  fs::path target = tmp.path / "missing-dir" / "out.txt";
  expectOneLineError(kiln({"compile", kMlp, "-o", target.string()}), 1, {target.string()});
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(listDir(tmp.path).empty()) << "left behind: " << fmt::format("{}", fmt::join(listDir(tmp.path), ", "));
}

TEST(Cli, EmitIntoForeignNonEmptyDirectoryLeavesItUnchanged) {
  TempDir tmp;
  fs::path dir = tmp.path / "mine";
  fs::create_directories(dir);
  std::ofstream(dir / "notes.txt") << "keep me\n";
  expectOneLineError(kiln({"compile", kMlp, "--emit", "cuda", "-o", dir.string()}), 1, {dir.string()});
  EXPECT_EQ(listDir(dir), std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(readFile(dir / "notes.txt"), "keep me\n");
  EXPECT_EQ(listDir(tmp.path), std::vector<std::string>{"mine"}) << "a temporary directory was left behind";
}

TEST(Cli, UnknownArchRefusedNamingTheKnownTargets) {
  TempDir tmp;
  fs::path out = tmp.path / "out";
  expectOneLineError(kiln({"compile", kMlp, "--emit", "cuda", "-o", out.string(), "--arch", "sm_75"}), 2,
                     {"--arch", "'sm_75'", knownArchList()});
  expectOneLineError(kiln({"compile", kMlp, "--arch", "sm_90A"}), 2, {"'sm_90A'", knownArchList()});
  expectOneLineError(kiln({"run", kMlp, "--interpret", "--arch", "sm_75"}), 2, {"'sm_75'", knownArchList()});
  EXPECT_TRUE(listDir(tmp.path).empty()) << "left behind: " << fmt::format("{}", fmt::join(listDir(tmp.path), ", "));
}

// --arch reaches nvcc only as one element of its argument vector, and only after it names a Target: no shell
// ever sees it, nor a file name.
TEST(Cli, ArchCannotRunAShellCommand) {
  const std::string injection = "sm_90 -o x; touch INJECTED; #";
  TempDir tmp;
  fs::path out = tmp.path / "out";
  std::string model = (fs::path(KILN_SOURCE_DIR) / kMlp).string();
  expectOneLineError(kiln({"compile", model, "--emit", "cuda", "-o", out.string(), "--arch", injection}, tmp.path), 2,
                     {"--arch", knownArchList()});
  expectOneLineError(kiln({"run", model, "--arch", injection}, tmp.path), 2, {"--arch", knownArchList()});
  EXPECT_TRUE(listDir(tmp.path).empty()) << "left behind: " << fmt::format("{}", fmt::join(listDir(tmp.path), ", "));
  EXPECT_FALSE(fs::exists(fs::path(KILN_SOURCE_DIR) / "INJECTED"));

  // Past the validation, straight to nvcc: it refuses the architecture, and nothing runs the rest.
  fs::path src = tmp.path / "src";
  fs::create_directories(src);
  std::ofstream(src / "k.cu") << "extern \"C\" __global__ void k(float* p) { p[0] = 1.0f; }\n";
  try {
    cuda::compileWithNvcc(src, {"k.cu"}, injection);
    ADD_FAILURE() << "nvcc accepted -arch=" << injection;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("Unsupported gpu architecture"), std::string::npos) << e.what();
  }
  // A file name that would end a single-quoted shell word compiles as the name it is.
  const std::string name = "x'; touch INJECTED; '.cu";
  std::ofstream(src / name) << "extern \"C\" __global__ void k(float* p) { p[0] = 1.0f; }\n";
  EXPECT_EQ(cuda::compileWithNvcc(src, {name}, "sm_80"), "");
  EXPECT_TRUE(fs::exists(src / "x'; touch INJECTED; '.cubin"));
  EXPECT_EQ(listDir(src), (std::vector<std::string>{"k.cu", name, "x'; touch INJECTED; '.cubin"}));
  EXPECT_EQ(listDir(tmp.path), std::vector<std::string>{"src"});
  EXPECT_FALSE(fs::exists(fs::current_path() / "INJECTED"));
}

// ---- success paths ----

TEST(Cli, PassesListsEveryPass) {
  Result r = kiln({"passes"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(r.err.empty()) << describe(r);
  for (const PassInfo& p : allPasses()) EXPECT_TRUE(contains(r.out, p.name + " ")) << p.name << "\n" << r.out;
}

TEST(Cli, CompilePrintsLoopIrByDefault) {
  Result r = kiln({"compile", kMlp});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(r.out.rfind("// kiln loop IR: mlp\n", 0), 0u) << describe(r);
  EXPECT_TRUE(r.err.empty()) << describe(r);
}

TEST(Cli, CompileWritesOutputFile) {
  TempDir tmp;
  fs::path out = tmp.path / "mlp.tile.txt";
  Result r = kiln({"compile", kMlp, "--ir", "tile", "-o", out.string()});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
  EXPECT_EQ(kiln({"compile", kMlp, "--ir", "tile"}).out, readFile(out));
  EXPECT_EQ(listDir(tmp.path), std::vector<std::string>{"mlp.tile.txt"});
}

TEST(Cli, StopAfterPrintsThatPassesIr) {
  Result r = kiln({"compile", kMlp, "--ir", "cuda", "--stop-after", "loop-fuse-producers"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(r.out.rfind("// kiln loop IR: mlp\n", 0), 0u) << describe(r);
  EXPECT_FALSE(contains(r.out, "__global__")) << describe(r);
}

TEST(Cli, VerboseNamesPasses) {
  Result r = kiln({"compile", kMlp, "-v"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "kiln: pass torch-import")) << describe(r);
  EXPECT_TRUE(contains(r.err, "kiln: pass loop-fuse-producers")) << describe(r);
  EXPECT_FALSE(contains(r.err, "@@")) << describe(r);
}

TEST(Cli, DoubleVerbosePrintsDiffs) {
  Result r = kiln({"compile", kMlp, "-vv"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "@@")) << describe(r);
  EXPECT_TRUE(contains(r.err, "+++ after loop-fuse-producers")) << describe(r);
}

TEST(Cli, TimePasses) {
  Result r = kiln({"compile", kMlp, "--time-passes"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "total")) << describe(r);
  EXPECT_TRUE(contains(r.err, "loop-fuse-producers")) << describe(r);
}

// An input given twice was silently the last one; -o naming the model replaced the model with IR text (issue 45).
TEST(Cli, AnInputGivenTwiceAndOutputOverTheModelAreRefused) {
  expectOneLineError(kiln({"compile", kMlp, "--input", "x=1x8x64", "--input", "x=2x8x64"}), 2,
                     {"--input x is given twice (x=1x8x64 and x=2x8x64)"});
  TempDir tmp;
  const fs::path model = tmp.path / "m.pt";
  fs::copy_file(kMlp, model);
  const std::string before = readFile(model);
  expectOneLineError(kiln({"compile", model.string(), "--ir", "loop", "-o", model.string()}), 2,
                     {"-o " + model.string() + " names the model being compiled"});
  EXPECT_EQ(readFile(model), before);
  EXPECT_EQ(kiln({"compile", model.string(), "--ir", "loop", "-o", (tmp.path / "m.lir").string()}).code, 0);
}

TEST(Cli, DumpDirWritesOneFilePerPass) {
  TempDir tmp;
  fs::path dump = tmp.path / "dump";
  Result r = kiln({"compile", kMlp, "--ir", "loop", "--dump-dir", dump.string()});
  ASSERT_EQ(r.code, 0) << describe(r);
  std::vector<std::string> expected;
  int index = 0;
  for (const PassInfo& p : allPasses()) {
    if (!p.onByDefault) continue;  // a pass that does not run is neither numbered nor dumped
    ++index;
    if (p.level == "torch" || p.level == "tensor" || p.level == "loop")
      expected.push_back(fmt::format("{:02}-{}.txt", index, p.name));
  }
  std::vector<std::string> listed = expected;
  listed.insert(listed.begin(), kMarkerFileName);  // the -o rules' marker
  EXPECT_EQ(listDir(dump), listed);
  // The last dump is the printed level.
  EXPECT_EQ(readFile(dump / expected.back()), r.out);
  // The same directory again: kiln's, so it is rewritten.
  r = kiln({"compile", kMlp, "--ir", "loop", "--dump-dir", dump.string()});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(listDir(dump), listed);
}

// A FIFO where kiln reads a file (--product-shapes, an output directory's marker) blocked it forever (issue 45).
TEST(Cli, FifosWhereFilesBelongAreRefusedNotWaitedFor) {
  TempDir tmp;
  const fs::path fifo = tmp.path / "shapes.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expectOneLineError(kiln({"compile", kMlp, "--product-shapes", fifo.string()}), 1,
                     {"--product-shapes: '" + fifo.string() + "' is a FIFO, not a file"});
  const fs::path out = tmp.path / "out";
  fs::create_directories(out);
  ASSERT_EQ(::mkfifo((out / kMarkerFileName).c_str(), 0600), 0);
  expectOneLineError(kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", out.string()}), 1,
                     {"is a FIFO, not a marker kiln wrote"});
}

// A mistyped command said "A subcommand is required"; options choosing what compile writes were silently ignored when
// given together (--ir with --emit cuda, --explain-fusion with --ir): each is one line now (issue 53).
TEST(Cli, UnknownCommandsAndConflictingOutputsAreNamed) {
  expectOneLineError(kiln({"compil", kMlp}), 2, {"unknown command 'compil' (did you mean 'compile'?)"});
  expectOneLineError(kiln({"xyzzy"}), 2, {"unknown command 'xyzzy'; kiln --help lists the commands"});
  // An unknown pass name: the three nearest, the likeliest first, not the whole list.
  expectOneLineError(kiln({"compile", kMlp, "--disable-pass", "loop-fuse-epilogue"}), 2,
                     {"unknown pass 'loop-fuse-epilogue'; the nearest: loop-fuse-epilogues, loop-fuse-producers, loop-fuse-rows"});
  TempDir tmp;
  expectOneLineError(kiln({"compile", kMlp, "--ir", "tile", "--emit", "cuda", "--no-nvcc", "-o", (tmp.path / "out").string()}),
                     2, {"--ir and --emit each choose what kiln compile writes; give one of them"});
  EXPECT_FALSE(fs::exists(tmp.path / "out"));
  expectOneLineError(kiln({"compile", kMlp, "--explain-fusion", "--ir", "loop"}), 2, {"--ir and --explain-fusion"});
  expectOneLineError(kiln({"compile", kMlp, "--explain-fusion", "--explain-schedule"}), 2,
                     {"--explain-fusion and --explain-schedule"});
  EXPECT_EQ(kiln({"compile", kMlp, "--explain-schedule"}).code, 0);
}

// --dump-dir follows -o's rules: it replaced files of the same name in any directory and wrote through symlinks placed
// there (issue 45). A directory kiln did not write is refused whole, the user's files untouched.
TEST(Cli, DumpDirNeverReplacesAUsersFiles) {
  TempDir tmp;
  const fs::path dump = tmp.path / "dump", mine = tmp.path / "mine.txt";
  fs::create_directories(dump);
  std::ofstream(mine) << "keep";
  fs::create_symlink(mine, dump / "01-torch-import.txt");
  expectOneLineError(kiln({"compile", kMlp, "--ir", "loop", "--dump-dir", dump.string()}), 1,
                     {"--dump-dir '" + dump.string() + "' is a non-empty directory that kiln did not write"});
  EXPECT_EQ(readFile(mine), "keep");
  EXPECT_TRUE(fs::is_symlink(dump / "01-torch-import.txt"));
}

TEST(Cli, RunCheckInterpretPasses) {
  Result r = kiln({"run", kMlp, "--check", "--interpret"});
  expectCheckPasses(r);
  EXPECT_TRUE(contains(r.out, "PASS")) << describe(r);
}

TEST(Cli, ExplainFusion) {
  Result r = kiln({"compile", kMlp, "--explain-fusion"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "kiln fusion report")) << describe(r);
  EXPECT_TRUE(contains(r.out, "kernel k0_")) << describe(r);
  EXPECT_TRUE(contains(r.out, "kernel k1_")) << describe(r);
  EXPECT_TRUE(contains(r.out, "aten::silu")) << describe(r);
  EXPECT_TRUE(r.err.empty()) << describe(r);
}

// --explain-schedule: every kernel's schedule on one line; a bf16 product shaped by tile-shape-products says what the
// model predicted for its tile, against the tile it replaced, and the other candidates it weighed. Per target: sm_90a
// products are warpgroup (wgmma) products, sm_80 ones mma.sync.
TEST(Cli, ExplainSchedule) {
  std::vector<std::string> args = {"compile", "models/fixtures/linear.pt", "--input", "x=2x512x64", "--dtype", "bf16",
                                   "--explain-schedule"};
  Result r = kiln(args);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "// kiln schedules: linear (target sm_90a, 132 SMs)")) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(k0_add  // aten::linear @ linear\.py:12\n  tiled_contraction .* wgmma\.m64n)")))
      << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\[shape-products: \d+x\d+ predicted [0-9.]+ us against [0-9.]+ us for \d+x\d+; others: )")))
      << describe(r);
  EXPECT_TRUE(contains(r.out, "pointwise_map vector")) << describe(r);
  args.push_back("--arch");
  args.push_back("sm_80");
  Result a100 = kiln(args);
  ASSERT_EQ(a100.code, 0) << describe(a100);
  EXPECT_TRUE(contains(a100.out, "mma.sync.m16n8k16.bf16")) << describe(a100);
  EXPECT_FALSE(contains(a100.out, "wgmma")) << describe(a100);
}

// --dtype on a trace that fixes a dtype (transformers' RMSNorm casts to f32; GPT-NeoX's rotary tables stay f32):
// refused before any work, in one line naming the op and saying to trace the model in that dtype. A trace that
// fixes none (kiln's own Llama) is recast and checked.
TEST(Cli, DtypeRefusesTracesThatFixTheirDtype) {
  expectOneLineError(kiln({"run", "models/fixtures/hf_qwen2_tiny.pt", "--check", "--interpret", "--dtype", "bf16"}), 1,
                     {"hf_qwen2_tiny.pt", "--dtype bf16 cannot recast this trace", "aten::to at ", "computes f32",
                      "trace the model in bf16 instead"});
  expectOneLineError(kiln({"compile", "models/fixtures/hf_gpt_neox_tiny.pt", "--dtype", "f16"}), 1,
                     {"--dtype f16 cannot recast this trace", "aten::mul at ", "model.to(torch.float16)"});
  Result ok = kiln({"run", "models/fixtures/llama_tiny.pt", "--check", "--interpret", "--dtype", "bf16"});
  expectCheckPasses(ok);
}

TEST(Cli, RunCheckInterpretWithDtypeBf16) {
  Result r = kiln({"run", kMlp, "--check", "--interpret", "--dtype", "bf16"});
  expectCheckPasses(r);
  EXPECT_TRUE(contains(r.out, "bf16[")) << "the output is bf16:\n" << describe(r);
  // DESIGN.md §4: kiln and LibTorch in bf16, each against an f32 evaluation; both errors printed.
  EXPECT_TRUE(contains(r.out, "against f32: kiln rel_l2")) << describe(r);
  EXPECT_TRUE(contains(r.out, "LibTorch bf16")) << describe(r);
  EXPECT_TRUE(contains(r.out, "PASS")) << describe(r);
}

// A natively bf16 trace (HF casts to f32 around RMSNorm and rotary) is judged against its f32 evaluation too.
TEST(Cli, RunCheckBf16TraceAgainstItsF32Evaluation) {
  Result r = kiln({"run", "models/fixtures/hf_llama_tiny_bf16.pt", "--check", "--interpret"});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "bf16[1x16x256] against f32: kiln rel_l2")) << describe(r);
  EXPECT_TRUE(contains(r.out, "check passed")) << describe(r);
}

// Gemma-2's eager attention pins a cast, softmax(..., dtype=float32).to(bfloat16): its f32 evaluation makes that an f32
// cast (it failed with "expected scalar type Float but found BFloat16" and the check fell back to bf16 against bf16).
TEST(Cli, RunCheckBf16TraceWithPinnedCastsAgainstItsF32Evaluation) {
  Result r = kiln({"run", "models/fixtures/hf_gemma2_tiny_bf16.pt", "--check", "--interpret"});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "bf16[1x16x256] against f32: kiln rel_l2")) << describe(r);
  EXPECT_FALSE(contains(r.out, "no f32 evaluation")) << describe(r);
}

TEST(Cli, BadDtype) {
  expectOneLineError(kiln({"run", kMlp, "--check", "--interpret", "--dtype", "i64"}), 2, {"--dtype", "i64"});
  expectOneLineError(kiln({"compile", kMlp, "--dtype", "i64"}), 2, {"--dtype", "i64"});
}

TEST(Cli, RunCheckInterpretHfLlama) {
  Result r = kiln({"run", "models/fixtures/hf_llama_tiny.pt", "--check", "--interpret"});
  expectCheckPasses(r);
  EXPECT_TRUE(contains(r.out, "f32[1x16x256]")) << describe(r);
}

// An f32 model with integer inputs (token ids) is checked at the f32 tolerance: the i64 input does not
// count as a low precision.
TEST(Cli, RunCheckF32LlamaUsesTheF32Tolerance) {
  Result r = kiln({"run", "models/fixtures/llama_tiny.pt", "--check", "--interpret"});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "(tolerance 1e-05) PASS")) << describe(r);
}

TEST(Cli, BenchFlagsWithoutOrAgainstBench) {
  expectOneLineError(kiln({"run", kMlp, "--graph"}), 2, {"--graph", "--bench N"});
  expectOneLineError(kiln({"run", kMlp, "--no-graph"}), 2, {"--no-graph", "--bench N"});
  expectOneLineError(kiln({"run", kMlp, "--bench", "3", "--graph", "--no-graph"}), 2, {"--graph", "--no-graph", "give one"});
  expectOneLineError(kiln({"run", kMlp, "--rotate-mb", "150"}), 2, {"--rotate-mb", "--bench N"});
  expectOneLineError(kiln({"run", kMlp, "--bench", "10", "--rotate-mb", "-1"}), 2, {"--rotate-mb", "-1"});
  expectOneLineError(kiln({"run", kMlp, "--bench", "-3"}), 2, {"--bench", "-3"});
  expectOneLineError(kiln({"run", kMlp, "--bench", "10", "--interpret"}), 2, {"--bench", "--interpret"});
  expectOneLineError(kiln({"run", kMlp, "--profile"}), 2, {"--profile", "--bench N"});
}

// Large enough matrix products are tiled by default; --disable-pass keeps the one-output-per-thread schedule,
// and kiln says under -v which passes were skipped. Both schedules pass the check.
TEST(Cli, TiledContractionsByDefaultDisablePassKeepsThePlainSchedule) {
  std::vector<std::string> args = {"compile", "models/fixtures/linear.pt", "--ir", "tile", "--input", "x=2x512x64", "-v"};
  Result tiled = kiln(args);
  EXPECT_EQ(tiled.code, 0) << describe(tiled);
  EXPECT_TRUE(contains(tiled.out, "schedule tiled_contraction ")) << describe(tiled);
  args.insert(args.end(), {"--disable-pass", "tile-tiled-contractions"});
  Result plain = kiln(args);
  EXPECT_EQ(plain.code, 0) << describe(plain);
  EXPECT_FALSE(contains(plain.out, "tiled_contraction")) << describe(plain);
  EXPECT_TRUE(contains(plain.err, "pass tile-tiled-contractions skipped (--disable-pass)")) << describe(plain);
  for (bool disable : {false, true}) {
    std::vector<std::string> run = {"run", "models/fixtures/linear.pt", "--check", "--interpret", "--input", "x=2x512x64"};
    if (disable) run.insert(run.end(), {"--disable-pass", "tile-tiled-contractions"});
    Result r = kiln(run);
    EXPECT_EQ(r.code, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "check passed")) << describe(r);
  }
}

// Every pass is on by default (DESIGN.md §3.10): `kiln passes` marks none off; -v names a disabled one as skipped and
// --disable-pass tile-deep-k-slices keeps the 16-deep slices the deep ones replace (the product's schedule before
// tile-stream-ffma-products, which replaces it whole, is disabled too).
// The passes off by default are exactly those docs/pipeline.md lists as off (a new one is added there and here
// together): loop-fuse-norm-products and kernel-finish-in-last-block, each measured slower on an H100 within issue 43.
TEST(Cli, OnlyTheListedPassesAreOffByDefaultAndDisablePassSkipsOne) {
  Result list = kiln({"passes"});
  EXPECT_EQ(list.code, 0) << describe(list);
  EXPECT_TRUE(contains(list.out, "tile-attention-scores-by-wgmma")) << describe(list);
  std::vector<std::string> off;
  std::istringstream lines(list.out);
  for (std::string line; std::getline(lines, line);)
    if (contains(line, "off by default")) off.push_back(line.substr(0, line.find(' ', line.find_first_not_of(' '))));
  ASSERT_EQ(off.size(), 2u) << describe(list);
  EXPECT_TRUE(contains(off[0], "loop-fuse-norm-products")) << off[0];
  EXPECT_TRUE(contains(off[1], "kernel-finish-in-last-block")) << off[1];
  std::vector<std::string> args = {"compile", "models/fixtures/linear.pt", "--ir", "tile", "--input", "x=2x512x64", "-v",
                                   "--disable-pass", "tile-stream-ffma-products"};
  Result deep = kiln(args);
  EXPECT_EQ(deep.code, 0) << describe(deep);
  EXPECT_TRUE(contains(deep.out, "x64 (")) << describe(deep);  // tile MxNxK, 64 deep
  args.insert(args.end(), {"--disable-pass", "tile-deep-k-slices"});
  Result plain = kiln(args);
  EXPECT_EQ(plain.code, 0) << describe(plain);
  EXPECT_TRUE(contains(plain.out, "x16 (")) << describe(plain);
  EXPECT_TRUE(contains(plain.err, "pass tile-deep-k-slices skipped (--disable-pass)")) << describe(plain);
}

TEST(Cli, EnableOrDisableUnknownPassOrALowering) {
  expectOneLineError(kiln({"compile", kMlp, "--enable-pass", "tile-no-such-pass"}), 2, {"tile-no-such-pass", "kiln passes"});
  expectOneLineError(kiln({"compile", kMlp, "--disable-pass", "tile-lower-from-loop"}), 2,
                     {"tile-lower-from-loop", "produces the tile IR"});
}

TEST(Cli, StopOrPrintAfterAPassThatDoesNotRun) {
  expectOneLineError(kiln({"compile", kMlp, "--stop-after", "tile-tiled-contractions", "--disable-pass",
                           "tile-tiled-contractions"}), 2, {"tile-tiled-contractions", "--disable-pass"});
  expectOneLineError(kiln({"compile", kMlp, "--print-after", "loop-fuse-rows", "--disable-pass", "loop-fuse-rows"}), 2,
                     {"loop-fuse-rows", "--disable-pass"});
}

TEST(Cli, DisablePassSkipsIt) {
  Result r = kiln({"compile", kMlp, "--ir", "loop", "--disable-pass", "loop-fuse-producers", "-v"});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "pass loop-fuse-producers skipped (--disable-pass)")) << describe(r);
}

TEST(Cli, EmitCudaForSm80AndTheDefaultSm90a) {
  TempDir tmp;
  fs::path out = tmp.path / "sm80";
  Result r = kiln({"compile", kMlp, "--emit", "cuda", "-o", out.string(), "--arch", "sm_80"});
  ASSERT_EQ(r.code, 0) << describe(r);
  runtime::Manifest m = runtime::readManifest(out);
  EXPECT_EQ(m.arch, "sm_80");
  ASSERT_FALSE(m.kernels.empty());
  for (const runtime::KernelInfo& k : m.kernels) EXPECT_GT(fs::file_size(out / k.cubin), 0u) << k.cubin;

  fs::path plain = tmp.path / "default";
  r = kiln({"compile", kMlp, "--emit", "cuda", "--no-nvcc", "-o", plain.string()});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(runtime::readManifest(plain).arch, "sm_90a");
}

TEST(Cli, RunWithoutGpuSuggestsInterpret) {
  if (runtime::gpuAvailable()) GTEST_SKIP() << "this machine has a CUDA GPU";
  expectOneLineError(kiln({"run", kMlp}), 1, {"GPU", "--interpret"});
}

}  // namespace
}  // namespace kiln
