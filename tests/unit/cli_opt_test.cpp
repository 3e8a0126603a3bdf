// `kiln opt` as a subprocess: the exit codes the README promises (lit's `not` in tests/passes only sees nonzero):
// 0 with the IR printed back or written to -o, 1 for a file that does not parse or verify, 2 for a bad pass or level.
#include <gtest/gtest.h>

#include "cli_support.h"

namespace kiln::test::cli {
namespace {

fs::path passTest(const std::string& name) { return fs::path(KILN_SOURCE_DIR) / "tests" / "passes" / "kernel" / name; }

TEST(CliOpt, PrintsTheResultOrWritesIt) {
  Result r = kiln({"opt", passTest("kernel-overlap-launches.kir").string(), "--passes", "kernel-overlap-launches"});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "kernel k1_neg grid(1,1,1) block(64,1,1) shared 0 bytes programmatic-launch")) << describe(r);
  TempDir tmp;
  const fs::path out = tmp.path / "out.kir";
  r = kiln({"opt", passTest("kernel-overlap-launches.kir").string(), "-o", out.string()});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
  EXPECT_EQ(readFile(out).rfind("// kiln kernel IR: two_kernels\ntarget sm_90a\n", 0), 0u) << readFile(out);
}

TEST(CliOpt, BadFilesAreUserErrors) {
  expectOneLineError(kiln({"opt", passTest("parse-error.kir").string()}), 1, {"parse-error.kir:14:26:", "'j'"});
  expectOneLineError(kiln({"opt", passTest("verify-barrier-under-divergence.kir").string()}), 1,
                     {"not valid Kernel IR", "barrier under thread-dependent control flow"});
  expectOneLineError(kiln({"opt", "no-such-file.kir"}), 1, {"cannot read", "no-such-file.kir"});
}

TEST(CliOpt, BadPassesAndLevelsAreUsageErrors) {
  const std::string file = passTest("round-trip.kir").string();
  expectOneLineError(kiln({"opt", file, "--passes", "kernel-nonexistent"}), 2, {"unknown pass 'kernel-nonexistent'"});
  expectOneLineError(kiln({"opt", file, "--passes", "tile-unroll-rings"}), 2, {"a tile pass"});
  expectOneLineError(kiln({"opt", file, "--passes", "kernel-lower-from-tile"}), 2, {"from the level above"});
  expectOneLineError(kiln({"opt", file, "--level", "torch"}), 2, {"--level torch", "loop, tile or kernel"});
  // Kernel IR read as Tile IR: the parser's line and column, exit 1.
  expectOneLineError(kiln({"opt", file, "--level", "tile"}), 1, {"round-trip.kir:13:1:", "expected 'target', 'buffer'"});
}

}  // namespace
}  // namespace kiln::test::cli
