// Golden IR dumps: tests/golden/<model>/<level>.txt holds printLevel's text for every fixture and level.
// A change in any pass shows up as a unified diff here; when it is intended, regenerate the files with
// tests/update_goldens.sh (or KILN_UPDATE_GOLDENS=1 ./build/kiln_tests --gtest_filter='Golden*') and review
// the diff in version control.
#include <gtest/gtest.h>

#include "test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/driver/pipeline.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

// A golden: a fixture, compiled at its recorded shapes or at `input` (so that its products are large enough for
// tiled and tensor-core schedules), optionally cast to bf16.
struct Golden {
  std::string name, fixture, input;
  std::optional<DType> cast;
};
const std::vector<Golden> kModels = {
    {"elementwise", "elementwise", "", {}}, {"reductions", "reductions", "", {}}, {"rmsnorm", "rmsnorm", "", {}},
    {"rmsnorm_aten", "rmsnorm_aten", "", {}}, {"softmax", "softmax", "", {}}, {"linear", "linear", "", {}},
    {"mlp", "mlp", "", {}}, {"attention", "attention", "", {}}, {"shapes", "shapes", "", {}},
    {"hf_llama_tiny", "hf_llama_tiny", "", {}}, {"hf_gpt2_tiny", "hf_gpt2_tiny", "", {}},
    // Mid-size: a tiled f32 product on CUDA cores (64-deep slices, prefetched) and a bf16 SwiGLU MLP on tensor
    // cores (operand pairs) with 16-byte vectorized elementwise kernels.
    {"linear_tiled", "linear", "x=2x512x64", {}}, {"mlp_bf16_tiled", "mlp", "x=4x512x64", DType::BF16},
    // bf16 attention as flash-attention kernels: causal sdpa and a sliding-window eager chain (issue 13).
    {"attention_bf16", "attention_bf16", "", {}},
    // A mixture of experts (issue 44): Mixtral's router (softmax, topk) and its experts gathered by index into the
    // products (transformers' batched_mm form).
    {"hf_mixtral_tiny", "hf_mixtral_tiny", "", {}}};

Compiled compileGolden(const Golden& g) {
  std::vector<frontend::InputOverride> inputs;
  if (!g.input.empty()) inputs.push_back(frontend::parseInputOverride(g.input));
  return compileModel(test::fixturePath(g.fixture), inputs, PipelineOptions{}, "cuda", g.cast);
}


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

class GoldenIR : public ::testing::TestWithParam<Golden> {};

TEST_P(GoldenIR, EveryLevelMatchesItsDump) {
  const std::string model = GetParam().name;
  Compiled c = compileGolden(GetParam());
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
  const std::string model = GetParam().name;
  Compiled a = compileGolden(GetParam()), b = compileGolden(GetParam());
  for (const std::string& level : allLevels()) {
    std::string ta = printLevel(a, level), tb = printLevel(b, level);
    EXPECT_TRUE(ta == tb) << model << " " << level << " differs between two compilations:\n"
                          << unifiedDiff(ta, tb, "first", "second");
    EXPECT_EQ(printLevel(a, level, /*json=*/true), printLevel(b, level, /*json=*/true)) << model << " " << level << " JSON";
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenIR, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<Golden>& info) { return info.param.name; });

}  // namespace
}  // namespace kiln
