// `kiln run --json` (issue 53 item 7): stdout is one JSON object holding what the text run prints — the run, each
// output's sum and fingerprint, the check's verdict per output — with the text lines under "messages"; an error is
// still one line on stderr with nothing on stdout.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "cli_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;
using nlohmann::json;

TEST(CliRunJson, HoldsTheRunTheOutputsAndTheCheck) {
  const std::string mlp = test::fixturePath("mlp");
  Result r = kiln({"run", mlp, "--interpret", "--check", "--json"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const json j = json::parse(r.out);
  EXPECT_EQ(j["model"], "mlp");
  EXPECT_EQ(j["kernels"], 2);
  ASSERT_EQ(j["outputs"].size(), 1u);
  EXPECT_EQ(j["outputs"][0]["shape"], json::parse("[1, 8, 64]"));
  EXPECT_TRUE(j["check"]["passed"].get<bool>());
  EXPECT_FALSE(j["check"]["reference_on_gpu"].get<bool>());
  const json& out0 = j["check"]["outputs"][0];
  EXPECT_TRUE(out0["passed"].get<bool>());
  EXPECT_LT(out0["rel_l2"].get<double>(), out0["tolerance"].get<double>());
  EXPECT_EQ(j["messages"].back(), "kiln: check passed against LibTorch");
  // Without --check: no verdict, and the same sum and fingerprint the text run prints.
  Result text = kiln({"run", mlp, "--interpret"});
  Result plain = kiln({"run", mlp, "--interpret", "--json"});
  ASSERT_EQ(text.code, 0) << describe(text);
  ASSERT_EQ(plain.code, 0) << describe(plain);
  const json p = json::parse(plain.out);
  EXPECT_TRUE(p["check"].is_null());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text.out, m, std::regex("fnv1a ([0-9a-f]{16})"))) << text.out;
  EXPECT_EQ(p["outputs"][0]["fnv1a"], m[1].str());
}

TEST(CliRunJson, Bf16OutputsCarryTheirF32Judgement) {
  Result r = kiln({"run", test::fixturePath("attention_bf16"), "--interpret", "--check", "--json"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const json j = json::parse(r.out);
  const json& f32 = j["check"]["outputs"][0]["against_f32"];
  ASSERT_TRUE(f32.is_object()) << j.dump(1);
  EXPECT_LE(f32["kiln_rel_l2"].get<double>(), f32["bound"].get<double>());
}

TEST(CliRunJson, AnErrorIsStillOneLineAndNoJson) {
  Result r = kiln({"run", "/nonexistent/model.pt", "--interpret", "--json"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  expectOneLineError(r, 1, {"not found"});
}

}  // namespace
}  // namespace kiln
