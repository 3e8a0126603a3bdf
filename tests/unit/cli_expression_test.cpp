// `kiln compile -c EXPR` and `kiln run -c EXPR` (issue 53 item 8): a PyTorch call traced by Python into a temporary
// model that kiln compiles like any other; its tensor arguments are the inputs x0, x1, ...; Python's errors come back
// as one line; the temporary directory goes when kiln ends.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;
using test::TempDir;
namespace fs = std::filesystem;

TEST(CliExpression, AModuleCallCompilesWithItsTensorAsTheInput) {
  Result r = kiln({"compile", "-c", "torch.nn.RMSNorm(64)(torch.randn(1, 8, 64))", "--ir", "loop"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "buffer x0 : f32[1x8x64] input")) << describe(r);
  EXPECT_TRUE(contains(r.out, "aten::rms_norm")) << describe(r);
  EXPECT_TRUE(contains(r.out, "buffer fn.weight : f32[64] weight")) << "the module's weight" << describe(r);
}

TEST(CliExpression, CallsRunAndCheckAgainstLibTorch) {
  expectCheckPasses(kiln({"run", "-c", "torch.softmax(torch.randn(4, 512), -1)", "--check", "--interpret"}));
  Result two = kiln({"run", "-c", "F.linear(torch.randn(2, 16), torch.randn(8, 16), bias=None)", "--check", "--interpret"});
  expectCheckPasses(two);
  Result inputs = kiln({"compile", "-c", "F.linear(torch.randn(2, 16), torch.randn(8, 16))", "--ir", "torch"});
  ASSERT_EQ(inputs.code, 0) << describe(inputs);
  EXPECT_TRUE(contains(inputs.out, "x0") && contains(inputs.out, "x1")) << "both tensors are inputs" << describe(inputs);
}

// -vv shows each pass's diff, as for a model file.
TEST(CliExpression, VerboseShowsEachTilePass) {
  Result r = kiln({"compile", "-c", "torch.nn.RMSNorm(2048)(torch.randn(1, 32, 2048))", "--ir", "tile", "-vv"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "--- before tile-cooperative-reduce")) << describe(r);
}

TEST(CliExpression, PythonErrorsAndMisuseAreOneLine) {
  expectOneLineError(kiln({"compile", "-c", "torch.nosuch(torch.randn(2))"}), 1, {"-c", "AttributeError", "nosuch"});
  expectOneLineError(kiln({"compile", "-c", "1 + 2"}), 1, {"not a call"});
  expectOneLineError(kiln({"compile", "-c", "torch.zeros(3)"}), 1, {"no tensor argument"});
  expectOneLineError(kiln({"compile", "-c", "torch.relu(torch.randn(2)"}), 1, {"SyntaxError"});
  expectOneLineError(kiln({"compile", "-c", "  "}), 2, {"-c needs an expression"});
  expectOneLineError(kiln({"compile"}), 2, {"needs a model", "-c EXPR"});
  expectOneLineError(kiln({"run"}), 2, {"needs a model", "-c EXPR"});
  expectOneLineError(kiln({"compile", "models/fixtures/mlp.pt", "-c", "torch.relu(torch.randn(3))"}), 2, {"not both"});
}

// The traced file lives in a fresh directory under TMPDIR, removed when kiln ends (after an error too).
TEST(CliExpression, TheTemporaryDirectoryIsRemoved) {
  TempDir tmp;
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  setenv("TMPDIR", tmp.path.c_str(), 1);
  Result ok = kiln({"compile", "-c", "torch.relu(torch.randn(3))", "--ir", "torch"});
  Result bad = kiln({"compile", "-c", "torch.nosuch(torch.randn(2))"});
  if (old) setenv("TMPDIR", saved.c_str(), 1);
  else unsetenv("TMPDIR");
  EXPECT_EQ(ok.code, 0) << describe(ok);
  EXPECT_EQ(bad.code, 1) << describe(bad);
  EXPECT_TRUE(fs::is_empty(tmp.path)) << "left behind under TMPDIR";
}

}  // namespace
}  // namespace kiln
