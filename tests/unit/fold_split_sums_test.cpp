// tile-fold-split-sums end to end through the SIMT interpreter: mlp_bf16_wide's down product (k = 512) split 2 and
// 4 ways by tile-shape-products, its slices copied by TMA or cp.async into a wgmma ring, then folded back into one kernel whose
// blocks hand their partial tiles to the tile's last block. The sums are the adding kernel's, term for term (the
// same pieces, each walked in the same rotated slice order, added from the first piece on), so the folded program
// gives the bits of the two-kernel one; both are the Loop program's up to the order of the f32 sums.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <tuple>

#include "kiln/cuda/emitter.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/tile/layout.h"
#include "kernel_test_support.h"
#include "test_support.h"

namespace kiln {
namespace {

// mlp_bf16_wide on sm_90a at Tile IR, its products tiled, made wgmma products (copied by TMA with `tma`, else by
// cp.async), and every eligible one
// (the down product, one stage) split `split` ways in tiles of 64 x 64, then stacked, ringed and overlapped as the
// pipeline would.
Compiled splitProducts(int64_t split, bool tma) {
  PipelineOptions o;
  o.disable = {"tile-stack-operands", "tile-deepen-rings", "tile-overlap-wgmma"};
  Compiled c = compileModel(test::fixturePath("mlp_bf16_wide"), {}, o, "tile");
  tile::tileContractions(c.tileIR, /*minTiles=*/1);
  tile::tensorCoreContractions(c.tileIR);
  tile::fuseOperandProducers(c.tileIR);
  EXPECT_TRUE(tile::warpgroupProducts(c.tileIR));
  const tile::ProductShape shape{64, 64, split};
  EXPECT_TRUE(tile::shapeProducts(c.tileIR, &shape));
  tile::stackOperands(c.tileIR);  // then the pipeline's passes up to the copies, in its order
  tile::deepenRings(c.tileIR);
  tile::overlapWgmma(c.tileIR);
  if (tma) {  // (braces: gtest's macros are an if/else of their own)
    EXPECT_TRUE(tile::tmaCopies(c.tileIR));
  }
  tile::verify(c.tileIR);
  return c;
}

size_t kernelsNamed(const tile::Program& p, const std::string& suffix) {
  size_t n = 0;
  for (const loop::Kernel& k : p.loop.kernels) n += k.name.ends_with(suffix);
  return n;
}

class FoldSplitSums : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(FoldSplitSums, OneKernelWithTheBitsOfThePartialAndAddingKernels) {
  const auto [split, tma] = GetParam();
  Compiled c = splitProducts(split, tma);
  ASSERT_EQ(kernelsNamed(c.tileIR, "_split"), 1u) << "the down product, split";
  tile::Program folded = c.tileIR;
  ASSERT_TRUE(tile::foldSplitSums(folded));
  tile::verify(folded);
  EXPECT_EQ(folded.loop.kernels.size() + 1, c.tileIR.loop.kernels.size());
  EXPECT_EQ(kernelsNamed(folded, "_split"), 0u);
  int64_t splitInKernel = 0;
  for (const tile::Schedule& s : folded.schedules)
    if (auto* t = std::get_if<tile::TiledContraction>(&s); t && t->kSplit > 1) {
      EXPECT_EQ(t->kSplit, split);
      EXPECT_EQ(t->a.copy, tma ? tile::TiledContraction::Copy::Tma : tile::TiledContraction::Copy::CpAsync);
      ++splitInKernel;
    }
  EXPECT_EQ(splitInKernel, 1);

  const kernel::Program two = kernel::lowerFromTile(c.tileIR), one = kernel::lowerFromTile(folded);
  kernel::verify(one);
  EXPECT_EQ(one.kernels.size() + 1, two.kernels.size());
  const auto inputs = test::randomInputs(one, 11);
  auto got = kernel::interpret(one, inputs), want = kernel::interpret(two, inputs);
  auto exact = loop::interpret(c.loopIR, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(compare(got[i], want[i]).relL2, 0.0) << "split " << split << " output " << i;
    EXPECT_LE(compare(got[i], exact[i]).relL2, 1e-3) << "split " << split << " output " << i;
  }
  kernel::kernel_test::expectNvccCompiles(one);
}

INSTANTIATE_TEST_SUITE_P(Splits, FoldSplitSums, ::testing::Combine(::testing::Values(2, 4), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int64_t, bool>>& info) {
                           return fmt::format("split{}_{}", std::get<0>(info.param), std::get<1>(info.param) ? "tma" : "cp_async");
                         });

// A split product whose adding kernel reads a partial alone (not the whole sum) is left as it is.
TEST(FoldSplitSumsRule, LeavesAPartialReadAloneUnfolded) {
  Compiled c = splitProducts(2, true);
  tile::Program p = c.tileIR;
  for (size_t i = 0; i + 1 < p.loop.kernels.size(); ++i)
    if (p.loop.kernels[i].name.ends_with("_split")) {
      loop::Kernel& adding = p.loop.kernels[i + 1];
      adding.result = loop::apply(loop::Fn::Mul, {adding.result, loop::load(p.loop.kernels[i].output, [&] {
                                                     std::vector<Idx> at{idxConst(0)};
                                                     for (const loop::Axis& a : adding.parallel) at.push_back(idxVar(a.var, a.name));
                                                     return at;
                                                   }())});
    }
  EXPECT_FALSE(tile::foldSplitSums(p));
}

}  // namespace
}  // namespace kiln
