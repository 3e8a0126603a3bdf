// The rules that decide where a wgmma product's block stands alone on its SM and where the producer warp (with clusters)
// pays (include/kiln/tile/layout.h; passes/tile/specialize_warps.cpp says what the H200 measured): tile::oneBlockPerSm
// from the registers, tile::ringDepth's deeper ring for such blocks, tile::computeBound from flops against bytes; and
// the tiles and splits tile-shape-products' models choose for the suite's products (tile::predictProductShape).
#include <fmt/format.h>
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

// tile-shape-products' choices for the suite's bf16 products on the H200, each the tile and split that measured fastest
// of those tried (bench/results/2026-12-03-h200-shape-sweep-931763e.txt, -products-bf16-ae62c67.md; the streaming
// model's header says why): a test that fails here means the model changed its mind about a measured product.
TEST(ProductRules, ShapeModelsTakeTheMeasuredTiles) {
  Program p;
  p.target = targetFor("sm_90a");
  TiledContraction s = wgmmaTile(64);
  s.tileM = 64;
  s.a.copy = s.b.copy = TiledContraction::Copy::CpAsync;  // tile-tma-copies runs later
  auto chosen = [&](int64_t m, int64_t n, int64_t k) {
    const ProductCandidate best = predictProductShape(p, s, product(m, n, k)).best;
    return fmt::format("{}x{} split {}", best.tileM, best.tileN, best.split);
  };
  EXPECT_EQ(chosen(128, 2048, 2048), "64x64 split 2");    // TinyLlama q_proj, 128 tokens: 7.2 us; 64x128 split 4, 7.9
  EXPECT_EQ(chosen(32, 5632, 2048), "64x128 split 2");    // TinyLlama gate_proj, 32 tokens: 9.5 us; 64x48, 11.9
  EXPECT_EQ(chosen(32, 18944, 3584), "64x144 split 1");   // Qwen2.5-7B gate_proj, 32 tokens: one wave, 34.8 us; 64x72 in two, 46.6
  EXPECT_EQ(chosen(32, 3584, 3584), "64x112 split 4");    // Qwen2.5-7B q_proj, 32 tokens: 9.9 us; 64x56 split 2, 12.2
  EXPECT_EQ(chosen(128, 3584, 3584), "128x56 split 2");   // Qwen2.5-7B q_proj, 128 tokens: 12.8 us; 128x112 split 4, 13.9
  EXPECT_EQ(chosen(512, 3584, 3584), "128x112 split 1");  // compute-bound: Qwen2.5-7B q_proj, 512 tokens; 128x224 split 2, 28.4
  // The stream-K rule: Qwen2.5-7B gate_proj at 512 tokens, 296 tiles of 128 x 256 walked as one wave: 121.1 us; 256 x 96 in
  // three whole waves, 131.9. TinyLlama gate_proj (88 such tiles, under two waves) keeps the model's choice.
  EXPECT_EQ(chosen(512, 18944, 3584), "128x256 split 1");
  EXPECT_TRUE(predictProductShape(p, s, product(512, 18944, 3584)).streamK);
  EXPECT_FALSE(predictProductShape(p, s, product(512, 5632, 2048)).streamK);
  EXPECT_FALSE(predictProductShape(p, s, product(512, 3584, 3584)).streamK);
  // The tie the streaming rule breaks there: one wave of 64 x 144 tiles and two of 64 x 72 predicted within 5 %.
  const ProductPrediction gate = predictProductShape(p, s, product(32, 18944, 3584));
  EXPECT_LT(gate.predict(64, 72, 1), gate.predict(64, 144, 1) * 1.05);
}

}  // namespace
}  // namespace kiln::tile
