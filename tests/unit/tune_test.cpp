// kiln tune's schedule space (issue 46): tile::productSpaces and `kiln tune --dry-run`. Every candidate of every
// distinct tensor-core product compiles through the Tile passes and verifies; the analytic choice is in the space,
// once per product, and is the schedule a plain compile gives.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "kiln/driver/pipeline.h"
#include "kiln/tile/space.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;

// The Tile program of `fixture` as tile-shape-products receives it.
tile::Program beforeShapeProducts(const std::string& fixture) {
  PipelineOptions o;
  Compiled c = compileModel(test::fixturePath(fixture), {}, o, "loop");
  tile::Program p = tile::lowerFromLoop(c.loopIR, targetFor("sm_90a"));
  for (const auto& pass : tilePasses()) {
    if (std::string(pass.name) == "tile-shape-products") break;
    if (o.runs(*findPass(pass.name))) pass.run(p);
  }
  return p;
}

TEST(TuneSpace, TheAnalyticChoiceIsInTheSpaceAndIsWhatACompileGives) {
  const tile::Program before = beforeShapeProducts("mlp_bf16_wide");
  const std::vector<tile::ProductSpace> spaces = tile::productSpaces(before);
  ASSERT_EQ(spaces.size(), 1u);
  const tile::ProductSpace& s = spaces[0];
  EXPECT_GT(s.candidates.size(), 4u);
  int analytic = 0;
  const tile::SpaceCandidate* chosen = nullptr;
  for (const tile::SpaceCandidate& c : s.candidates) {
    analytic += c.analytic;
    if (c.analytic) chosen = &c;
  }
  ASSERT_EQ(analytic, 1) << "exactly one analytic choice";
  for (size_t i = 1; i < s.candidates.size(); ++i)
    EXPECT_LE(s.candidates[i - 1].micros, s.candidates[i].micros) << "fastest prediction first";
  // The same program through tile-shape-products alone takes the analytic candidate's tile.
  tile::Program shaped = before;
  tile::shapeProducts(shaped);
  const auto& k = std::get<tile::TiledContraction>(shaped.schedules[static_cast<size_t>(s.kernels[0])]);
  EXPECT_EQ(k.tileM, chosen->tileM);
  EXPECT_EQ(k.tileN, chosen->tileN);
  // A table entry for another candidate makes tile-shape-products take that one instead.
  const tile::SpaceCandidate& other = s.candidates.back().analytic ? s.candidates.front() : s.candidates.back();
  tile::Program forced = before;
  forced.productShapes = {tile::tableEntry(s, other)};
  tile::shapeProducts(forced);
  const auto& f = std::get<tile::TiledContraction>(forced.schedules[static_cast<size_t>(s.kernels[0])]);
  EXPECT_EQ(f.tileM, other.tileM);
  EXPECT_EQ(f.tileN, other.tileN);
}

TEST(TuneCli, DryRunListsAndVerifiesEveryCandidate) {
  Result r = kiln({"tune", test::fixturePath("mlp_bf16_wide"), "--dry-run"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "1 distinct tensor-core product")) << describe(r);
  EXPECT_TRUE(contains(r.out, "<- analytic choice")) << describe(r);
  EXPECT_FALSE(contains(r.out, "REFUSED")) << describe(r);
  Result j = kiln({"tune", test::fixturePath("mlp_bf16_wide"), "--dry-run", "--json"});
  ASSERT_EQ(j.code, 0) << describe(j);
  auto report = nlohmann::json::parse(j.out);
  ASSERT_EQ(report["products"].size(), 1u);
  int analytic = 0;
  for (const auto& c : report["products"][0]["candidates"]) {
    EXPECT_TRUE(c["verifies"].get<bool>()) << c.dump();
    analytic += c["analytic"].get<bool>();
  }
  EXPECT_EQ(analytic, 1);
  EXPECT_EQ(report["refused"], 0);
  EXPECT_EQ(report["candidates"], report["products"][0]["candidates"].size());
}

TEST(TuneCli, MeasuringIsRefusedInOneLineUntilItExists) {
  expectOneLineError(kiln({"tune", test::fixturePath("mlp_bf16_wide")}), 2, {"--dry-run", "not built yet"});
  expectOneLineError(kiln({"tune", "--dry-run"}), 2, {"needs a model"});
}

// A model without tensor-core products has nothing to tune, and says so.
TEST(TuneCli, AModelWithoutTensorCoreProductsHasAnEmptySpace) {
  Result r = kiln({"tune", test::fixturePath("mlp"), "--dry-run"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "0 distinct tensor-core products")) << describe(r);
  EXPECT_TRUE(contains(r.out, "nothing to tune")) << describe(r);
}

// The TinyLlama shape's q, k and v product at 128 tokens (one product, traced from an expression).
TEST(TuneCli, ATinyLlamaShapedProductVerifiesEveryCandidate) {
  if (!haveTorch()) GTEST_SKIP() << "needs python3 with torch";
  Result r = kiln({"tune", "-c",
                   "torch.nn.Linear(2048, 2560, bias=False).to(torch.bfloat16)(torch.randn(1, 128, 2048, dtype=torch.bfloat16))",
                   "--dry-run"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "product bf16 128x2560x2048, 1 stage")) << describe(r);
  EXPECT_TRUE(contains(r.out, "<- analytic choice")) << describe(r);
  EXPECT_FALSE(contains(r.out, "REFUSED")) << describe(r);
}

}  // namespace
}  // namespace kiln
