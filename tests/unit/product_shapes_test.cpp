// --product-shapes FILE: product tiles and splits chosen outside kiln's models (tile::TabledShape), for the f32 products of
// tile-stream-ffma-products and the bf16 wgmma products of tile-shape-products; a shape neither pass can give, and a
// file that is not a table, are one-line errors (exit 1).
#include <gtest/gtest.h>

#include <fstream>

#include "cli_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;

std::string table(const TempDir& dir, const std::string& json) {
  std::string path = (dir.path / "shapes.json").string();
  std::ofstream(path) << json;
  return path;
}

// linear at 2 x 512 tokens: the f32 product 512 x 48 x 64 of 2 outer points, 32 x 32 by the model.
TEST(ProductShapes, TableReplacesTheModelsChoice) {
  TempDir dir;
  std::vector<std::string> args = {"compile", "models/fixtures/linear.pt", "--input", "x=2x512x64", "--explain-schedule"};
  Result model = kiln(args);
  ASSERT_EQ(model.code, 0) << describe(model);
  EXPECT_TRUE(contains(model.out, "tile 32x32x16")) << describe(model);
  args.insert(args.end(), {"--product-shapes", table(dir, R"({"products": [{"type": "f32", "m": 512, "n": 48, "k": 64,
      "outer": 2, "tile_m": 64, "tile_n": 32}]})")});
  Result tabled = kiln(args);
  ASSERT_EQ(tabled.code, 0) << describe(tabled);
  EXPECT_TRUE(contains(tabled.out, "tile 64x32x16")) << describe(tabled);
  EXPECT_TRUE(contains(tabled.out, "64x32 from --product-shapes")) << describe(tabled);
  // The tabled product still computes what LibTorch does.
  std::vector<std::string> run = {"run", "models/fixtures/linear.pt", "--input", "x=2x512x64", "--check", "--interpret",
                                  "--product-shapes", (dir.path / "shapes.json").string()};
  expectCheckPasses(kiln(run));
}

// mlp_bf16_wide's down product (64 x 192 x 512, bf16, wgmma on sm_90a).
TEST(ProductShapes, TableShapesWarpgroupProducts) {
  TempDir dir;
  Result r = kiln({"compile", "models/fixtures/mlp_bf16_wide.pt", "--explain-schedule", "--product-shapes",
                   table(dir, R"({"products": [{"type": "bf16", "m": 64, "n": 192, "k": 512, "tile_m": 64, "tile_n": 96,
                   "split": 2}]})")});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "64x96 split 2 from --product-shapes")) << describe(r);
  // "stream_k" asks for the tiles to be walked as one wave (tile-stream-k-products); this product's 8 slices get no
  // producer warp, so the schedule says it is not walked.
  Result walked = kiln({"compile", "models/fixtures/mlp_bf16_wide.pt", "--explain-schedule", "--product-shapes",
                        table(dir, R"({"products": [{"type": "bf16", "m": 64, "n": 192, "k": 512, "tile_m": 64, "tile_n": 32,
                        "stream_k": true}]})")});
  ASSERT_EQ(walked.code, 0) << describe(walked);
  EXPECT_TRUE(contains(walked.out, "stream-K chosen but not walked")) << describe(walked);
}

TEST(ProductShapes, BadTablesAreOneLine) {
  TempDir dir;
  auto compile = [&](const std::string& json) {
    return kiln({"compile", "models/fixtures/linear.pt", "--input", "x=2x512x64", "--ir", "tile", "--product-shapes", table(dir, json)});
  };
  expectOneLineError(compile("{bad"), 1, {"--product-shapes", "is not JSON"});
  expectOneLineError(compile(R"({"shapes": []})"), 1, {"--product-shapes", "no \"products\" list"});
  expectOneLineError(compile(R"({"products": [{"type": "f64", "m": 1, "n": 1, "k": 1, "tile_m": 32, "tile_n": 32}]})"), 1,
                     {"entry 0", "\"type\" must be"});
  expectOneLineError(compile(R"({"products": [{"type": "f32", "m": 512, "n": 48, "k": 64, "tile_m": 32}]})"), 1,
                     {"entry 0", "no \"tile_n\""});
  expectOneLineError(compile(R"({"products": [{"type": "f32", "m": 512, "n": 48, "k": 64, "tile_m": 48, "tile_n": 32}]})"), 1,
                     {"entry 0", "tile 48x32 split 1 is not one tile-stream-ffma-products can give", "512x48x64"});
  expectOneLineError(compile(R"({"products": [{"type": "f32", "m": 512, "n": 48, "k": 64, "tile_m": 32, "tile_n": 32,
                     "stream_k": 1}]})"), 1, {"entry 0", "\"stream_k\" must be true or false"});
  expectOneLineError(kiln({"compile", "models/fixtures/linear.pt", "--product-shapes", (dir.path / "missing.json").string()}), 1,
                     {"--product-shapes", "cannot read"});
}

}  // namespace
}  // namespace kiln
