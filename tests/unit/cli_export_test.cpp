// torch.export archives (.pt2) through the CLI (issue 53 item 1): the program's graph, weights and input specs read in
// C++ (src/frontend/exported_program.cpp) into the Torch IR a trace makes. The archives come from
// models/exported_programs.py, run with python3 + torch + transformers at test time (the tests skip without them).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>

#include "cli_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;
namespace fs = std::filesystem;

class ExportedProgram : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    const std::string cmd = fmt::format("python3 {} {} >/dev/null 2>&1",
                                        quote((fs::path(KILN_SOURCE_DIR) / "models/exported_programs.py").string()),
                                        quote(dir_->path.string()));
    if (std::system(cmd.c_str()) != 0) dir_.reset();
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "python3 with torch and transformers not available (models/exported_programs.py failed)";
  }
  static std::string program(const std::string& name) { return (dir_->path / (name + ".pt2")).string(); }
  static std::unique_ptr<TempDir> dir_;
};
std::unique_ptr<TempDir> ExportedProgram::dir_;

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

// Two inputs and a buffer; --input may not change a shape the program fixed differently from its dtype's rules, but
// --dtype casts its weights as a trace's.
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
