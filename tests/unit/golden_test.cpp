// Golden IR dumps: tests/golden/<model>/<level>.txt holds printLevel's text for every fixture and level.
// A change in any pass shows up as a unified diff here; when it is intended, regenerate the files with
// tests/update_goldens.sh (or KILN_UPDATE_GOLDENS=1 ./build/kiln_tests --gtest_filter='Golden*') and review
// the diff in version control.
#include <gtest/gtest.h>

#include "test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/driver/pipeline.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

const std::vector<std::string> kModels = {"elementwise", "reductions", "rmsnorm",   "rmsnorm_aten", "softmax",
                                          "linear",      "mlp",        "attention", "shapes",       "hf_llama_tiny"};


fs::path goldenPath(const std::string& model, const std::string& level) {
  return fs::path(KILN_SOURCE_DIR) / "tests" / "golden" / model / (level + ".txt");
}

bool updating() {
  const char* v = std::getenv("KILN_UPDATE_GOLDENS");
  return v && std::string(v) == "1";
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class GoldenIR : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenIR, EveryLevelMatchesItsDump) {
  const std::string model = GetParam();
  Compiled c = compileModel(test::fixturePath(model), {}, PipelineOptions{}, "cuda");
  for (const std::string& level : allLevels()) {
    std::string text = printLevel(c, level);
    fs::path file = goldenPath(model, level);
    if (updating()) {
      fs::create_directories(file.parent_path());
      std::ofstream(file, std::ios::binary) << text;
      continue;
    }
    ASSERT_TRUE(fs::exists(file)) << file << " is missing; run tests/update_goldens.sh";
    std::string expected = readFile(file);
    EXPECT_TRUE(text == expected) << model << " " << level << " IR differs from " << file
                                  << " (run tests/update_goldens.sh if the change is intended):\n"
                                  << unifiedDiff(expected, text, file.string(), "current output");
  }
}

// The same model compiled twice prints the same text at every level (no pointer- or hash-order dependence).
TEST_P(GoldenIR, CompilationIsDeterministic) {
  const std::string model = GetParam();
  Compiled a = compileModel(test::fixturePath(model), {}, PipelineOptions{}, "cuda");
  Compiled b = compileModel(test::fixturePath(model), {}, PipelineOptions{}, "cuda");
  for (const std::string& level : allLevels()) {
    std::string ta = printLevel(a, level), tb = printLevel(b, level);
    EXPECT_TRUE(ta == tb) << model << " " << level << " differs between two compilations:\n"
                          << unifiedDiff(ta, tb, "first", "second");
    EXPECT_EQ(printLevel(a, level, /*json=*/true), printLevel(b, level, /*json=*/true)) << model << " " << level << " JSON";
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenIR, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kiln
