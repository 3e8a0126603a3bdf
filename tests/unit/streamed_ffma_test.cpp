// CUDA-core products streaming f32 slices (tile-stream-ffma-products): a cp.async ring of rows_f32 slices read as 16-byte
// vectors of four k, end to end through the SIMT interpreter (which faults on a read of a slice whose copy the reader has
// not waited for, or that another thread copied with no barrier since), nvcc, and the verifiers.
// mlp at 40 tokens: its gate/up product (two stages sharing x, 40 x 128 x 64; the last tile of rows part empty) and down
// product (40 x 64 x 128) are tiled whatever the block count, as tiled_contraction_test.cpp does.
#include <gtest/gtest.h>

#include "kiln/driver/pipeline.h"
#include "kiln/frontend/frontend.h"
#include "kiln/kernel/lower.h"
#include "kiln/tile/layout.h"
#include "kernel_test_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using TC = tile::TiledContraction;
using kernel::kernel_test::errorOf;

// mlp up to Tile IR without the passes that would choose otherwise (its few outputs make row reductions), every product
// tiled on CUDA cores; tile-stream-ffma-products is applied by the tests.
Compiled tiledMlp() {
  PipelineOptions o;
  o.disable = {"tile-cooperative-reduce", "tile-stream-ffma-products"};
  Compiled c = compileModel(test::fixturePath("mlp"), {frontend::parseInputOverride("x=1x40x64")}, o, "tile");
  tile::tileContractions(c.tileIR, /*minTiles=*/1);
  return c;
}

std::vector<const TC*> streamed(const tile::Program& p) {
  std::vector<const TC*> out;
  for (const tile::Schedule& s : p.schedules)
    if (auto* t = std::get_if<TC>(&s); t && t->a.layout == TC::SharedLayout::RowsF32) out.push_back(t);
  return out;
}

void expectMatchesTheLoopProgram(const Compiled& c, const kernel::Program& k) {
  auto inputs = test::randomInputs(k, 11);
  auto got = kernel::interpret(k, inputs);
  auto want = loop::interpret(c.loopIR, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Comparison cmp = compare(got[i], want[i]);
    EXPECT_LE(cmp.relL2, 1e-6) << "output " << i;
    EXPECT_TRUE(allFinite(got[i]));
  }
}

TEST(StreamedFfma, RingOfRowSlicesMatchesTheLoopProgram) {
  Compiled c = tiledMlp();
  ASSERT_TRUE(tile::streamFfmaProducts(c.tileIR));
  tile::verify(c.tileIR);
  std::vector<const TC*> s = streamed(c.tileIR);
  ASSERT_EQ(s.size(), 2u) << "gate/up and down";
  for (const TC* t : s) {
    EXPECT_EQ(t->a.copy, TC::Copy::CpAsync);
    EXPECT_GE(t->pipelineDepth, 2);
    EXPECT_EQ(t->tileK, 16);
    EXPECT_EQ(t->microM * t->microN * 256, t->tileM * t->tileN) << "256 threads";
    EXPECT_NE(t->model.find("stream-ffma-products"), std::string::npos);
  }
  kernel::Program k = kernel::lowerFromTile(c.tileIR);
  kernel::verify(k);
  expectMatchesTheLoopProgram(c, k);
  std::string text = kernel::print(k);
  EXPECT_NE(text.find("= load4 shared"), std::string::npos) << "four k of a row per shared load";
  EXPECT_NE(text.find("cp.async16"), std::string::npos);
  kernel::kernel_test::expectNvccCompiles(k);
}

// A split product: the partial products over halves of the reduction into an f32 buffer, then the kernel adding them.
TEST(StreamedFfma, SplitReductionMatchesTheLoopProgram) {
  Compiled c = tiledMlp();
  ASSERT_TRUE(tile::streamFfmaProducts(c.tileIR));
  const size_t down = c.tileIR.schedules.size() - 1;
  TC schedule = std::get<TC>(c.tileIR.schedules[down]);
  ASSERT_EQ(c.tileIR.loop.kernels[down].stages.size(), 1u);
  tile::splitProduct(c.tileIR, down, 2, schedule);
  tile::verify(c.tileIR);
  ASSERT_EQ(c.tileIR.loop.kernels.size(), down + 2);
  kernel::Program k = kernel::lowerFromTile(c.tileIR);
  kernel::verify(k);
  expectMatchesTheLoopProgram(c, k);
}

// A product of two stages (gate and up, sharing x) as one single-stage product per stage, split or not, and a kernel adding
// each stage's partials in place of its accumulator: silu(gate) * up computed from the sums.
TEST(StreamedFfma, StagesSeparatedMatchTheLoopProgram) {
  for (int64_t split : {1, 2}) {
    Compiled c = tiledMlp();
    ASSERT_TRUE(tile::streamFfmaProducts(c.tileIR));
    ASSERT_EQ(c.tileIR.loop.kernels[0].stages.size(), 2u);
    TC schedule = std::get<TC>(c.tileIR.schedules[0]);
    schedule.microM = schedule.tileM / 16;  // one stage's accumulators per thread
    schedule.microN = schedule.tileN / 16;
    const size_t before = c.tileIR.loop.kernels.size();
    tile::splitProduct(c.tileIR, 0, split, schedule);
    tile::verify(c.tileIR);
    ASSERT_EQ(c.tileIR.loop.kernels.size(), before + 2) << "two partial products and the adding kernel";
    EXPECT_EQ(c.tileIR.loop.kernels[0].name, c.tileIR.loop.kernels[1].name.substr(0, c.tileIR.loop.kernels[1].name.size() - 1) + "0");
    EXPECT_TRUE(std::holds_alternative<tile::PointwiseMap>(c.tileIR.schedules[2]));
    kernel::Program k = kernel::lowerFromTile(c.tileIR);
    kernel::verify(k);
    expectMatchesTheLoopProgram(c, k);
  }
}

// The pass leaves products alone whose operands cannot be copied 16 bytes at a time: a reduction that is not a multiple of 4.
TEST(StreamedFfma, OnlyOperandsCopyableSixteenBytesAtATime) {
  Compiled c = tiledMlp();
  tile::TiledContraction& t = std::get<TC>(c.tileIR.schedules[0]);
  TC rows = t;
  rows.a = rows.b = TC::Operand{TC::Copy::CpAsync, TC::SharedLayout::RowsF32};
  rows.tileK = 16;
  EXPECT_TRUE(tile::asyncCopyable(c.tileIR.loop, c.tileIR.loop.kernels[0], rows));
  rows.tileK = 18;
  EXPECT_FALSE(tile::asyncCopyable(c.tileIR.loop, c.tileIR.loop.kernels[0], rows)) << "tile_k not a multiple of 4";
  // rows_f32 slices need the cp_async ring; k-major slices cannot take one.
  t.a.layout = t.b.layout = TC::SharedLayout::RowsF32;
  EXPECT_NE(errorOf([&] { tile::verify(c.tileIR); }).find("rows_f32 slices streamed by cp_async"), std::string::npos);
}

// Kernel IR: a shared vector load needs an f32 buffer and an index provably a multiple of its width.
TEST(StreamedFfma, SharedVectorLoadsAreCheckedForAlignment) {
  using namespace kernel;
  Kernel k;
  k.name = "vec";
  k.block = {32, 1, 1};
  k.grid = {1, 1, 1};
  k.shared.push_back(SharedBuffer{"s", 256, DType::F32, false});
  for (int i = 0; i < 4; ++i) k.floatVars.push_back("v" + std::to_string(i));
  Block body;
  body.push_back(storeShared(0, threadIdx() * idxConst(4), fconst(1.f)));
  body.push_back(storeShared(0, threadIdx() * idxConst(4) + idxConst(1), fconst(2.f)));
  body.push_back(storeShared(0, threadIdx() * idxConst(4) + idxConst(2), fconst(3.f)));
  body.push_back(storeShared(0, threadIdx() * idxConst(4) + idxConst(3), fconst(4.f)));
  body.push_back(barrier());
  body.push_back(loadSharedVector(0, threadIdx() * idxConst(4), {0, 1, 2, 3}));
  body.push_back(storeGlobal(1, threadIdx(), fapply(Fn::Add, {fvar(0), fvar(3)})));
  k.body = body;
  Program p = kernel_test::program(1, 32, k);
  verify(p);
  auto out = interpret(p, {kernel_test::ramp(1)});
  for (float v : out[0].values) EXPECT_EQ(v, 5.f);
  p.kernels[0].body[5] = loadSharedVector(0, threadIdx() * idxConst(4) + idxConst(2), {0, 1, 2, 3});
  EXPECT_NE(errorOf([&] { verify(p); }).find("not provably aligned"), std::string::npos);
  // 16-bit buffers: 4 or 8 elements (8 or 16 bytes), widened to f32; 2 (4 bytes) is refused.
  p.kernels[0].shared[0].dtype = DType::BF16;
  p.kernels[0].body[5] = loadSharedVector(0, threadIdx() * idxConst(4), {0, 1, 2, 3});
  verify(p);
  out = interpret(p, {kernel_test::ramp(1)});
  for (float v : out[0].values) EXPECT_EQ(v, 5.f);
  EXPECT_NE(cuda::emit(p).sources[0].text.find("kiln::load_shared_vec<4>(&s[threadIdx.x*4], v0, v1, v2, v3);"), std::string::npos);
  kernel_test::expectNvccCompiles(p);
  p.kernels[0].body[5] = loadSharedVector(0, threadIdx() * idxConst(4), {0, 1});
  EXPECT_NE(errorOf([&] { verify(p); }).find("vectors are 2 or 4 f32, or 4 or 8 bf16/f16 (8 or 16 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace kiln
