// Tiles walked in groups of tile rows (TiledContraction::groupM, tile-group-tiles): the block order changes, the
// arithmetic of each tile does not, so a grouped product computes bit for bit what the n-fastest one computes, for
// CUDA-core and tensor-core products alike (a tile that no block or two blocks took would change the outputs); the
// kernels compile with nvcc; the verifier refuses a group that does not divide the tile
// rows; and the pass groups a product of many tile rows and columns.
#include <gtest/gtest.h>

#include "kernel_test_support.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/tile/layout.h"

namespace kiln {
namespace {

using TC = tile::TiledContraction;

// The fixture's tile IR with products tiled whatever their block count (the fixtures are small), and `group` tile rows
// per group on every product whose tile rows it divides; how many products were grouped.
int groupProducts(tile::Program& t, int64_t group) {
  int grouped = 0;
  for (size_t i = 0; i < t.schedules.size(); ++i) {
    auto* s = std::get_if<TC>(&t.schedules[i]);
    if (!s || s->cluster > 1 || s->streamBlocks > 0) continue;
    if (tile::tilesM(*s, tile::contractionOf(*s, t.loop.kernels[i])) % group != 0) continue;
    s->groupM = group;
    ++grouped;
  }
  return grouped;
}

void expectSameProducts(const std::string& fixture, const std::string& input, std::optional<DType> dtype, int64_t group) {
  SCOPED_TRACE(fixture + " group " + std::to_string(group));
  tile::Program t = compileModel(test::fixturePath(fixture), {frontend::parseInputOverride(input)}, {}, "tile", dtype).tileIR;
  tile::Program grouped = t;
  ASSERT_GT(groupProducts(grouped, group), 0);
  ASSERT_NO_THROW(tile::verify(grouped));
  EXPECT_NE(tile::print(grouped).find(fmt::format("in groups of {} tile rows, m fastest", group)), std::string::npos);
  kernel::Program plain = kernel::lowerFromTile(t), walked = kernel::lowerFromTile(grouped);
  ASSERT_NO_THROW(kernel::verify(walked));
  EXPECT_NE(kernel::print(walked), kernel::print(plain));
  auto inputs = test::randomInputs(plain, 5);
  auto want = kernel::interpret(plain, inputs), got = kernel::interpret(walked, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].values, want[i].values) << "output " << i;
  kernel::kernel_test::expectNvccCompiles(walked);
}

TEST(GroupTiles, GroupedOrderComputesTheSameProducts) {
  expectSameProducts("linear", "x=2x512x64", std::nullopt, 2);     // f32 on CUDA cores, tiles of 64 rows
  expectSameProducts("mlp", "x=4x512x64", DType::BF16, 4);          // bf16 on tensor cores
}

TEST(GroupTiles, VerifierRefusesAGroupThatDoesNotDivideTheTileRows) {
  tile::Program t = compileModel(test::fixturePath("linear"), {frontend::parseInputOverride("x=2x512x64")}, {}, "tile").tileIR;
  bool set = false;
  for (size_t i = 0; i < t.schedules.size() && !set; ++i)
    if (auto* s = std::get_if<TC>(&t.schedules[i])) {
      const int64_t rows = tile::tilesM(*s, tile::contractionOf(*s, t.loop.kernels[i]));
      ASSERT_GT(rows, 1);
      s->groupM = rows + 1;
      set = true;
    }
  ASSERT_TRUE(set);
  const std::string msg = kernel::kernel_test::errorOf([&] { tile::verify(t); });
  EXPECT_NE(msg.find("need a divisor of the"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln
