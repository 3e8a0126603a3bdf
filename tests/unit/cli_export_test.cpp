// torch.export archives (.pt2) through the CLI (issue 53 item 1): the program's graph, weights and input specs read in
// C++ (src/frontend/exported_program.cpp) into the Torch IR a trace makes. The archives come from
// models/exported_programs.py, run with python3 + torch + transformers at test time (the tests skip without them).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>

#include "cli_support.h"
#include "kiln/support/hash.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;
namespace fs = std::filesystem;

// The archives are made once per version of the script and kept beside the kiln executable (ctest runs each test in a
// process of its own; exporting takes about 10 s): made into a temporary directory, then renamed into place, so that
// processes making them at once never see half a set.
class ExportedProgram : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path script = fs::path(KILN_SOURCE_DIR) / "models/exported_programs.py";
    const std::string text = readFile(script);
    const fs::path dir = fs::path(KILN_BINARY).parent_path() / "test-exported-programs" /
                         fmt::format("{:016x}", fnv1a(kFnvOffsetBasis, text.data(), text.size()));
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      TempDir made;
      const std::string cmd = fmt::format("python3 {} {} >/dev/null 2>&1", quote(script.string()), quote((made.path / "set").string()));
      if (std::system(cmd.c_str()) != 0) return;
      fs::create_directories(dir.parent_path(), ec);
      fs::rename(made.path / "set", dir, ec);  // another process may have put its set there first: either will do
    }
    if (fs::is_directory(dir, ec)) dir_ = dir;
  }
  void SetUp() override {
    if (dir_.empty()) GTEST_SKIP() << "python3 with torch and transformers not available (models/exported_programs.py failed)";
  }
  static std::string program(const std::string& name) { return (dir_ / (name + ".pt2")).string(); }
  static fs::path dir_;
};
fs::path ExportedProgram::dir_;

// The tiny Llama exported with torch.export: its input named and shaped from the program's signature (no --input),
// the interpreter's logits within f32's bound of LibTorch running the same program, every kernel output that holds
// one of the program's values equal to LibTorch's (--bisect), and the same kernels per layer as its trace.
TEST_F(ExportedProgram, ATinyLlamaPassesItsCheck) {
  Result r = kiln({"run", program("llama"), "--check", "--interpret", "--bisect", "--json"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["check"]["passed"].get<bool>()) << j.dump(1);
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json::parse("[1, 16, 256]"));
  EXPECT_TRUE(j["bisect"]["first_difference"].is_null()) << j["bisect"].dump(1);
  EXPECT_GE(j["bisect"]["compared"].get<int>(), 8) << j["bisect"].dump(1);
  Result torch = kiln({"compile", program("llama"), "--ir", "torch"});
  ASSERT_EQ(torch.code, 0) << describe(torch);
  EXPECT_TRUE(contains(torch.out, "graph(%input_ids: i64[1x16])")) << torch.out.substr(0, 2000);
  // Weights named as the program names them, ops located at the user's lines (the stack traces it records).
  EXPECT_TRUE(contains(torch.out, "weight \"model.model.embed_tokens.weight\"")) << torch.out.substr(0, 2000);
  EXPECT_TRUE(contains(torch.out, "modeling_llama.py:")) << torch.out.substr(0, 2000);
}

// Two of the families the traces cover, exported: their checks pass as their traces' do.
TEST_F(ExportedProgram, Gemma2AndDeepSeekV3PassTheirChecks) {
  for (const char* family : {"gemma2", "deepseek_v3"}) {
    SCOPED_TRACE(family);
    expectCheckPasses(kiln({"run", program(family), "--check", "--interpret"}));
  }
}

// Two inputs and a buffer, in f32 and cast to bf16 by --dtype as a trace's weights are (judged against f32).
TEST_F(ExportedProgram, TwoInputsAndABufferInF32AndBf16) {
  expectCheckPasses(kiln({"run", program("gated"), "--check", "--interpret"}));
  Result bf16 = kiln({"run", program("gated"), "--check", "--interpret", "--dtype", "bf16"});
  expectCheckPasses(bf16);
  EXPECT_TRUE(contains(bf16.out, "against f32")) << describe(bf16);
}

// A damaged archive (models/exported_programs.py's DAMAGES) is refused in one line naming what is wrong, never a crash.
TEST_F(ExportedProgram, DamagedArchivesAreOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"truncated", "not valid JSON"},         {"wrong_type", "damaged"},
      {"unknown_op", "LibTorch has no op"},    {"past_storage", "reaches past"},
      {"overflowing_stride", "reaches past"},  {"missing_weight", "no record"},
      {"unknown_value", "no earlier node"},    {"deep", "nests deeper"}};
  for (const auto& [name, why] : cases) {
    SCOPED_TRACE(name);
    expectOneLineError(kiln({"compile", program("damaged/" + name), "--ir", "loop"}), 1, {why});
  }
}

TEST_F(ExportedProgram, WhatKilnDoesNotReadIsOneLine) {
  expectOneLineError(kiln({"compile", program("dynamic"), "--ir", "loop"}), 1, {"dynamic", "static shapes"});
  expectOneLineError(kiln({"compile", program("llama_grad"), "--ir", "loop"}), 1, {"not an ATen op", "torch.no_grad()"});
}

}  // namespace
}  // namespace kiln
