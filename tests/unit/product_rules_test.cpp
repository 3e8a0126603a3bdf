// The rules that decide where a wgmma product's block stands alone on its SM and where the producer warp (with clusters)
// pays (include/kiln/tile/layout.h; passes/tile/specialize_warps.cpp says what the H200 measured): tile::oneBlockPerSm
// from the registers, tile::ringDepth's deeper ring for such blocks, tile::computeBound from flops against bytes.
#include <gtest/gtest.h>

#include "kiln/support/target.h"
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {

// A bf16 wgmma product of two warpgroups (tile_m 128) whose slices are swizzled 128-byte rows, 64 deep.
TiledContraction wgmmaTile(int64_t tileN) {
  TiledContraction s;
  s.instruction = TiledContraction::Instruction::Wgmma;
  s.mmaType = DType::BF16;
  s.tileM = 128;
  s.tileN = tileN;
  s.tileK = 64;
  s.a = s.b = {TiledContraction::Copy::Tma, TiledContraction::SharedLayout::Swizzled128};
  return s;
}

// One stage (a plain linear layer) of m x n x k.
Contraction product(int64_t m, int64_t n, int64_t k) {
  Contraction c;
  c.m = m;
  c.n = n;
  c.k = k;
  const Idx i = idxVar(1, "i"), j = idxVar(2, "j"), r = idxVar(3, "r");
  c.stages.push_back({loop::load(0, {i, r}), loop::load(1, {j, r}), 3});  // x[i][r] * w[j][r]
  return c;
}

// 128 x 144 tiles (72 accumulators, 104 registers) leave room for a second block and keep a ring sized for two blocks
// (3 slots of 34 KB); 128 x 256 tiles (128 accumulators, 160 registers) do not, and take 4 slots of 48 KB.
TEST(ProductRules, BlocksAloneByRegistersTakeTheWholeSharedMemory) {
  const Target& h200 = targetFor("sm_90a");
  const Contraction c = product(512, 18944, 3584);
  EXPECT_FALSE(oneBlockPerSm(h200, wgmmaTile(144), c));
  EXPECT_EQ(ringDepth(h200, wgmmaTile(144), c), 3);
  EXPECT_TRUE(oneBlockPerSm(h200, wgmmaTile(256), c));
  EXPECT_EQ(ringDepth(h200, wgmmaTile(256), c), 4);
  EXPECT_LE(4 * ringSlotBudget(wgmmaTile(256), c), h200.maxSharedPerBlock);
}

// The suite's products at 512 tokens are compute-bound on the H200, those at 32 and 128 are not, nor a narrow one
// (TinyLlama's k_proj: 256 columns) at 512.
TEST(ProductRules, ComputeBoundAtFiveHundredTwelveTokens) {
  const Target& h200 = targetFor("sm_90a");
  EXPECT_TRUE(computeBound(h200, wgmmaTile(112), product(512, 3584, 3584)));
  EXPECT_TRUE(computeBound(h200, wgmmaTile(128), product(512, 2048, 2048)));
  EXPECT_FALSE(computeBound(h200, wgmmaTile(112), product(128, 3584, 3584)));
  EXPECT_FALSE(computeBound(h200, wgmmaTile(48), product(32, 5632, 2048)));
  EXPECT_FALSE(computeBound(h200, wgmmaTile(64), product(512, 256, 2048)));
}

}  // namespace
}  // namespace kiln::tile
