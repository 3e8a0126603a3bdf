// wgmma products (sm_90a) end to end through the SIMT interpreter: tile-warpgroup-products' cp.async ring feeding
// wgmma from 128-byte-swizzled slices, with and without tile-overlap-wgmma's group left in flight. The interpreter
// multiplies when a wgmma is issued and faults when anything writes shared memory a pending wgmma reads, so a ring
// whose copies ran too far ahead of an unfinished wgmma fails here even though the values would come out right.
// mlp_bf16_wide's products reduce over 3 and 8 slices of 64 (the fixtures' others are one or two slices deep, too
// shallow for a group in flight); the test tiles them whatever the block count, as tiled_contraction_test.cpp does.
#include <gtest/gtest.h>

#include "kiln/cuda/emitter.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/support/error.h"
#include "kiln/tile/layout.h"
#include "kernel_test_support.h"
#include "test_support.h"

namespace kiln {
namespace {

struct Products {
  Compiled c;
  kernel::Program kernelIR;
  std::vector<tile::TiledContraction> schedules;  // the wgmma products' schedules
};

// mlp_bf16_wide on sm_90a up to Tile IR, every product tiled and made a wgmma product, then (deepen) tile-deepen-rings
// and (overlap) tile-overlap-wgmma; without deepen the down product's ring (4) is shallower than its 8 slices, so the
// loop's copies overwrite slots of earlier slices and the interpreter's pending-wgmma check has something to check;
// stacked false: the gate/up product's B slices in separate buffers, one wgmma per stage.
// (tma) then tile-tma-copies: every slice copied by TMA boxes completing on the ring slots' mbarriers; (producer) then
// tile-specialize-warps: tma products with a producer warp and empty mbarriers instead of the block barrier; (cluster,
// with producer) then tile-multicast-operands: the products whose tile columns pair up run in clusters of 2 that
// multicast their A slices (the down product's 192 columns in tiles of 32 instead of 64, so that its 6 tile columns pair
// up too).
Products wgmmaProducts(bool overlap, bool stacked = true, bool deepen = false, bool tma = false, bool cluster = false,
                       bool producer = false) {
  PipelineOptions o;
  o.disable = {"tile-stack-operands", "tile-deepen-rings", "tile-overlap-wgmma"};  // applied by hand below
  Products w;
  w.c = compileModel(test::fixturePath("mlp_bf16_wide"), {}, o, "tile");
  tile::tileContractions(w.c.tileIR, /*minTiles=*/1);
  tile::tensorCoreContractions(w.c.tileIR);
  tile::fuseOperandProducers(w.c.tileIR);
  EXPECT_TRUE(tile::warpgroupProducts(w.c.tileIR));  // then the passes after tile-shape-products, as the pipeline orders them
  if (stacked) {  // (braces: gtest's macros are an if/else of their own)
    EXPECT_TRUE(tile::stackOperands(w.c.tileIR));
  }
  if (deepen) {
    EXPECT_TRUE(tile::deepenRings(w.c.tileIR));
  }
  if (overlap) {
    EXPECT_TRUE(tile::overlapWgmma(w.c.tileIR));
  }
  if (tma) {
    EXPECT_TRUE(tile::tmaCopies(w.c.tileIR));
  }
  if (cluster)
    for (tile::Schedule& s : w.c.tileIR.schedules)
      if (auto* t = std::get_if<tile::TiledContraction>(&s); t && t->a.copy == tile::TiledContraction::Copy::Tma && !t->stackedB)
        t->tileN = 32;
  if (producer) {
    EXPECT_TRUE(tile::specializeWarps(w.c.tileIR, /*everywhere=*/true));
  }
  if (cluster) {
    EXPECT_TRUE(tile::multicastOperands(w.c.tileIR));
  }
  tile::verify(w.c.tileIR);
  for (const tile::Schedule& s : w.c.tileIR.schedules)
    if (auto* t = std::get_if<tile::TiledContraction>(&s); t && t->instruction == tile::TiledContraction::Instruction::Wgmma)
      w.schedules.push_back(*t);
  w.kernelIR = kernel::lowerFromTile(w.c.tileIR);
  kernel::multicastOperands(w.kernelIR);
  kernel::verify(w.kernelIR);
  return w;
}

std::vector<HostTensor> run(const Products& w) { return kernel::interpret(w.kernelIR, test::randomInputs(w.kernelIR, 7)); }

// Blocks walk the reduction's slices in a rotated order (see lower_contraction_async.cpp), so the f32 sums add in
// another order than the Loop interpreter's and the bf16 intermediate may round to its neighbour: 1e-3, where an
// indexing or ordering error is of order 1.
void expectMatchesTheLoopProgram(const Products& w, const char* what) {
  auto got = run(w);
  auto want = loop::interpret(w.c.loopIR, test::randomInputs(w.kernelIR, 7));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Comparison cmp = compare(got[i], want[i]);
    EXPECT_LE(cmp.relL2, 1e-3) << what << " output " << i;
    EXPECT_TRUE(allFinite(got[i])) << what;
  }
}

TEST(WarpgroupProducts, RingOfSwizzledSlicesMatchesTheLoopProgram) {
  Products w = wgmmaProducts(false);
  ASSERT_EQ(w.schedules.size(), 2u) << "gate/up and down";
  for (const tile::TiledContraction& s : w.schedules) {
    EXPECT_EQ(s.mmaInFlight, 0);
    EXPECT_EQ(s.tileK, 64);
    EXPECT_EQ(s.a.layout, tile::TiledContraction::SharedLayout::Swizzled128);
  }
  expectMatchesTheLoopProgram(w, "wait_group 0");
}

// One group in flight: the same values, bit for bit, the copies one slice less ahead than the ring allows (or the ring one slot
// deeper: the grid is one wave here), and the emitted loop waits for one pending group, then for all after it.
TEST(WarpgroupProducts, OneGroupInFlightMatchesTheLoopProgram) {
  Products before = wgmmaProducts(false), w = wgmmaProducts(true);
  ASSERT_EQ(w.schedules.size(), before.schedules.size());
  for (size_t i = 0; i < w.schedules.size(); ++i) {
    EXPECT_EQ(w.schedules[i].mmaInFlight, 1);
    EXPECT_GE(w.schedules[i].pipelineDepth, 4);
    EXPECT_GE(w.schedules[i].pipelineDepth, before.schedules[i].pipelineDepth);
  }
  expectMatchesTheLoopProgram(w, "one group in flight");
  auto got = run(w), want = run(before);  // the same sums in the same order: the same bits
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(compare(got[i], want[i]).relL2, 0.0) << "output " << i;
  const std::string cu = cuda::print(cuda::emit(w.kernelIR));
  EXPECT_NE(cu.find("kiln::wgmma_wait_group<1>();\n  }\n  kiln::wgmma_wait_group<0>();"), std::string::npos) << cu;
  const std::string tileText = tile::print(w.c.tileIR);
  EXPECT_NE(tileText.find(", 1 group in flight (copies "), std::string::npos) << tileText;
}

// gate/up read one x: their B slices share each ring slot and one wgmma.m64n128 per 16 of k multiplies both, with the
// bits of two m64n64 wgmmas (the same products summed in the same order).
TEST(WarpgroupProducts, StackedBSlicesGiveTheBitsOfSeparateWgmmas) {
  Products stacked = wgmmaProducts(true), separate = wgmmaProducts(true, false);
  ASSERT_EQ(stacked.schedules.size(), 2u);
  EXPECT_TRUE(stacked.schedules[0].stackedB) << "gate/up";
  EXPECT_FALSE(stacked.schedules[1].stackedB) << "down has one stage";
  const std::string ir = kernel::print(stacked.kernelIR);
  EXPECT_NE(ir.find("wgmma.m64n128k16.bf16"), std::string::npos) << ir;
  EXPECT_NE(ir.find("shared b: bf16"), std::string::npos) << ir;
  expectMatchesTheLoopProgram(stacked, "stacked");
  auto got = run(stacked), want = run(separate);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(compare(got[i], want[i]).relL2, 0.0) << "output " << i;
  tile::Program bad = stacked.c.tileIR;
  std::get<tile::TiledContraction>(bad.schedules[0]).tileN = 136;  // 2 x 136 columns: past wgmma's 256
  const std::string msg = kernel::kernel_test::errorOf([&] { tile::verify(bad); });
  EXPECT_NE(msg.find("stacked B slices need"), std::string::npos) << msg;
}

// A grid of one wave (4 blocks here) takes the deepest ring one block's shared memory holds, up to 8 slots and the
// reduction's slices plus one; a grid of more blocks than SMs keeps its ring.
TEST(WarpgroupProducts, OneWaveGridsTakeTheDeepestRingThatFits) {
  Products w = wgmmaProducts(true, true, true);
  ASSERT_EQ(w.schedules.size(), 2u);
  EXPECT_EQ(w.schedules[0].pipelineDepth, 4) << "gate/up: 3 slices of 64, so 4 slots";
  EXPECT_EQ(w.schedules[1].pipelineDepth, tile::kMaxRingDepth) << "down: 8 slices";
  Products again = wgmmaProducts(false);
  tile::Program p = again.c.tileIR;
  p.target.smCount = 2;  // the 4 blocks are two waves
  EXPECT_FALSE(tile::deepenRings(p));
}

// A ring of fewer than 4 slots would leave the copies one slice ahead or none: the pass leaves such products alone,
// and the verifier refuses a group in flight on a ring shallower than 3 or on mma.sync products.
TEST(WarpgroupProducts, GroupInFlightOnlyWhereTheCopiesStayAhead) {
  Products w = wgmmaProducts(false);
  tile::Program shallow = w.c.tileIR;
  for (tile::Schedule& s : shallow.schedules)
    if (auto* t = std::get_if<tile::TiledContraction>(&s); t && t->instruction == tile::TiledContraction::Instruction::Wgmma) {
      t->pipelineDepth = 2;
    }
  EXPECT_FALSE(tile::overlapWgmma(shallow)) << "a ring of 2 would copy nothing ahead";
  tile::Program bad = w.c.tileIR;
  for (tile::Schedule& s : bad.schedules)
    if (auto* t = std::get_if<tile::TiledContraction>(&s); t && t->instruction == tile::TiledContraction::Instruction::Wgmma) {
      t->mmaInFlight = 1;
      t->pipelineDepth = 2;
    }
  const std::string msg = kernel::kernel_test::errorOf([&] { tile::verify(bad); });
  EXPECT_NE(msg.find("1 wgmma groups in flight need a wgmma product with a ring of 3 or more slices"), std::string::npos) << msg;
}

// tile-tma-copies: both products' slices by TMA (one box per operand per slice, thread 0), the block waiting on the slot's
// mbarrier. The shallow ring (4 slots for the down product's 8 slices) has the copies refill slots of earlier slices,
// which the interpreter checks against pending wgmmas and unwaited phases; with deepen and overlap, a group in flight.
TEST(WarpgroupProducts, TmaRingsMatchTheLoopProgram) {
  for (bool overlap : {false, true}) {
    Products w = wgmmaProducts(overlap, true, overlap, true);
    ASSERT_EQ(w.schedules.size(), 2u);
    for (const tile::TiledContraction& s : w.schedules) EXPECT_EQ(s.a.copy, tile::TiledContraction::Copy::Tma);
    for (const kernel::Kernel& k : w.kernelIR.kernels)
      if (k.name.find("reduce_sum") != std::string::npos) {
        EXPECT_FALSE(k.tensorMaps.empty()) << k.name;
      }
    expectMatchesTheLoopProgram(w, overlap ? "tma, a group in flight" : "tma");
  }
}

// tile-specialize-warps: a producer warp after the warpgroups copies every slice, the warpgroups release each slot on its
// empty mbarrier. Without deepen the down product's ring of 4 holds its 8 slices in turn, so the producer waits for
// releases; the sums are those of the block-barrier ring with a group in flight, bit for bit. The emitted loop has no
// block barrier, the producer's threads store nothing, and the block is the warpgroups plus one warp.
TEST(WarpgroupProducts, ProducerWarpMatchesTheLoopProgram) {
  for (bool deepen : {false, true}) {
    Products w = wgmmaProducts(true, true, deepen, true, false, true), before = wgmmaProducts(true, true, deepen, true);
    ASSERT_EQ(w.schedules.size(), 2u);
    for (const tile::TiledContraction& s : w.schedules) {
      EXPECT_TRUE(s.producerWarp);
      EXPECT_EQ(s.mmaInFlight, 1);
      EXPECT_EQ(tile::threadsPerBlock(s), s.tileM / 64 * 128 + 32);
      EXPECT_EQ(tile::copiesAhead(s), s.pipelineDepth - 1);
    }
    expectMatchesTheLoopProgram(w, deepen ? "producer warp, deep rings" : "producer warp, rings reused");
    auto got = run(w), want = run(before);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(compare(got[i], want[i]).relL2, 0.0) << "output " << i;
  }
  Products w = wgmmaProducts(true, true, false, true, false, true);
  const std::string cu = cuda::print(cuda::emit(w.kernelIR));
  const size_t loop = cu.find("for (int k0 = 0;");
  ASSERT_NE(loop, std::string::npos) << cu;
  const std::string body = cu.substr(loop, cu.find("kiln::wgmma_wait_group<0>();", loop) - loop);
  EXPECT_EQ(body.find("__syncthreads();"), std::string::npos) << body;
  EXPECT_NE(body.find("kiln::mbarrier_arrive(&empty["), std::string::npos) << body;
  EXPECT_NE(body.find("kiln::mbarrier_wait(&empty["), std::string::npos) << body;
  EXPECT_NE(tile::print(w.c.tileIR).find("a producer warp issuing the copies"), std::string::npos);
  kernel::kernel_test::expectNvccCompiles(w.kernelIR);
}

// tile-unroll-rings: the producer-warp ring walked in rounds of its depth, each step on a constant slot. Without deepen
// the down product's 8 slices fill its ring of 4 twice (the empty waits' parities change between rounds) and the gate/up
// product's 3 slices stop short of a round (the guard); with clusters too. Bit-identical to the rolled loop; the emitted
// loop steps by whole rounds and computes no slot from k.
TEST(WarpgroupProducts, UnrolledRingMatchesTheRolledOne) {
  for (bool cluster : {false, true}) {
    Products rolled = wgmmaProducts(true, true, false, true, cluster, true);
    Products w = rolled;
    ASSERT_TRUE(tile::unrollRings(w.c.tileIR));
    tile::verify(w.c.tileIR);
    w.kernelIR = kernel::lowerFromTile(w.c.tileIR);
    EXPECT_NE(kernel::print(w.kernelIR).find(" unroll ring "), std::string::npos) << "the lowering marks the ring loops";
    EXPECT_EQ(kernel::multicastOperands(w.kernelIR), cluster);
    ASSERT_TRUE(kernel::unrollRings(w.kernelIR));
    kernel::verify(w.kernelIR);
    expectMatchesTheLoopProgram(w, cluster ? "unrolled ring, clusters" : "unrolled ring");
    auto got = run(w), want = run(rolled);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(compare(got[i], want[i]).relL2, 0.0) << "output " << i;
    const std::string cu = cuda::print(cuda::emit(w.kernelIR));
    EXPECT_EQ(cu.find("int slot ="), std::string::npos) << cu;
    EXPECT_NE(cu.find("int round ="), std::string::npos) << cu;
    EXPECT_NE(tile::print(w.c.tileIR).find("the k loop unrolled by the ring"), std::string::npos);
    kernel::kernel_test::expectNvccCompiles(w.kernelIR);
  }
}

// tile-multicast-operands: the producer warp of each block of a cluster multicasts its part of every A slice and waits,
// before refilling a slot, for the releases of every consumer warp of the cluster (each arrives on the slot's empty
// mbarrier in every block); without deepen the rings are reused, so the producers wait for releases. The interpreter
// checks that the blocks of a cluster issue the same copies and arrivals.
TEST(WarpgroupProducts, ProducerWarpInClustersMatchesTheLoopProgram) {
  Products w = wgmmaProducts(true, true, false, true, true, true);
  int clustered = 0;
  for (const tile::TiledContraction& s : w.schedules) {
    EXPECT_TRUE(s.producerWarp);
    clustered += s.cluster == 2;
  }
  EXPECT_EQ(clustered, 2);
  for (const kernel::Kernel& k : w.kernelIR.kernels)
    if (k.cluster > 1) {
      EXPECT_EQ(k.grid[0] % k.cluster, 0) << k.name;
    }
  expectMatchesTheLoopProgram(w, "producer warp in clusters");
  const std::string cu = cuda::print(cuda::emit(w.kernelIR));
  EXPECT_NE(cu.find("kiln::mbarrier_arrive_cluster<2>(&empty["), std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::tma_load_2d<true>("), std::string::npos) << cu;
  kernel::kernel_test::expectNvccCompiles(w.kernelIR);
}

// tile-stream-k-products: a persistent grid of 5 clusters walks the products' (unit, slice) steps across tiles, so that
// walks start and end inside tiles: the blocks that start inside a tile hand their partial tiles over through the
// partials buffer and a counter, the block of the tile's first slice waits for them (the interpreter checks the count is
// complete when it waits), adds them and applies the epilogue; launched twice, the counters are back at zero. With and
// without clusters; tile-unroll-rings leaves stream-K products rolled.
TEST(WarpgroupProducts, StreamKWalksMatchTheLoopProgram) {
  for (bool cluster : {false, true})
    for (bool unroll : {false, true}) {
      Products w = wgmmaProducts(true, true, false, true, cluster, true);
      const int64_t C = cluster ? 2 : 1;
      ASSERT_TRUE(tile::streamKProducts(w.c.tileIR, 5 * C));
      if (unroll) {
        EXPECT_FALSE(tile::unrollRings(w.c.tileIR)) << "stream-K products walk their own loops";
      }
      tile::verify(w.c.tileIR);
      int streamed = 0;
      for (size_t i = 0; i < w.c.tileIR.schedules.size(); ++i) {
        const auto* t = std::get_if<tile::TiledContraction>(&w.c.tileIR.schedules[i]);
        if (!t || t->streamBlocks == 0) continue;
        ++streamed;
        const tile::StreamK walk = tile::streamK(*t, tile::contractionOf(*t, w.c.tileIR.loop.kernels[i]));
        EXPECT_EQ(walk.clusters, 5);
        EXPECT_NE(walk.steps % walk.clusters, 0) << "walks of unequal length";
        EXPECT_GE(walk.pieces, 2) << "tiles shared by walks";
        EXPECT_NE(tile::describe(*t, w.c.tileIR.loop.kernels[i]).find("stream-K: a persistent grid of 5 clusters"), std::string::npos);
      }
      EXPECT_EQ(streamed, 2);
      w.kernelIR = kernel::lowerFromTile(w.c.tileIR);
      EXPECT_EQ(kernel::multicastOperands(w.kernelIR), cluster);
      kernel::verify(w.kernelIR);
      for (const kernel::Kernel& k : w.kernelIR.kernels)
        if (k.name.find("reduce_sum") != std::string::npos) {
          EXPECT_EQ(k.grid[0], 5 * C) << k.name;
        }
      expectMatchesTheLoopProgram(w, cluster ? "stream-K in clusters" : "stream-K");
      // Launched twice: the counters are back at zero after the first launch (the second's waits find their counts).
      kernel::Program twice = w.kernelIR;
      twice.kernels.insert(twice.kernels.end(), w.kernelIR.kernels.begin(), w.kernelIR.kernels.end());
      auto again = kernel::interpret(twice, test::randomInputs(w.kernelIR, 7)), once = run(w);
      ASSERT_EQ(again.size(), once.size());
      for (size_t o = 0; o < once.size(); ++o) EXPECT_EQ(compare(again[o], once[o]).relL2, 0.0) << "output " << o;
      kernel::kernel_test::expectNvccCompiles(w.kernelIR);
    }
}

// The verifier's rules for the producer warp: a tma product with a group in flight; and the Kernel-IR
// verifier refuses a wgmma that a part of a warpgroup reaches (here: the producer warp, were the consumers' guard in the
// k loop gone).
TEST(WarpgroupProducts, ProducerWarpRules) {
  Products w = wgmmaProducts(true, true, false, true);
  tile::Program bad = w.c.tileIR;
  for (tile::Schedule& s : bad.schedules)
    if (auto* t = std::get_if<tile::TiledContraction>(&s)) t->producerWarp = true, t->mmaInFlight = 0;
  std::string msg = kernel::kernel_test::errorOf([&] { tile::verify(bad); });
  EXPECT_NE(msg.find("a producer warp needs a tma product with one wgmma group in flight"), std::string::npos) << msg;
  Products p = wgmmaProducts(true, true, false, true, false, true);
  kernel::Kernel& k = p.kernelIR.kernels[0];
  ASSERT_EQ(k.block[0], 160) << "one warpgroup and the producer warp";
  for (kernel::Stmt& loop : k.body) {
    if (loop.kind != kernel::Stmt::Kind::For) continue;
    kernel::Block flat;  // the consumers' part of each step spliced in unguarded
    for (kernel::Stmt& st : loop.body) {
      const bool consumers = st.kind == kernel::Stmt::Kind::If && !st.body.empty() && st.body[0].kind == kernel::Stmt::Kind::MbarrierWait;
      if (consumers) flat.insert(flat.end(), st.body.begin(), st.body.end());
      else flat.push_back(st);
    }
    loop.body = flat;
  }
  msg = kernel::kernel_test::errorOf([&] { kernel::verify(p.kernelIR); });
  EXPECT_NE(msg.find("in a block of 160 threads (not whole warpgroups of 128)"), std::string::npos) << msg;
}

// Tiles of 256 rows: four consumer warpgroups and the producer warp (544 threads), the rows past m zero-filled by the
// TMA boxes; the same values as the Loop program, and nvcc fits them in the 96 registers 17 warps leave a thread.
TEST(WarpgroupProducts, FourWarpgroupsOf64RowsMatchTheLoopProgram) {
  PipelineOptions o;
  o.disable = {"tile-stack-operands", "tile-deepen-rings", "tile-overlap-wgmma"};
  Products w;
  w.c = compileModel(test::fixturePath("mlp_bf16_wide"), {}, o, "tile");
  tile::tileContractions(w.c.tileIR, /*minTiles=*/1);
  tile::tensorCoreContractions(w.c.tileIR);
  tile::fuseOperandProducers(w.c.tileIR);
  ASSERT_TRUE(tile::warpgroupProducts(w.c.tileIR));
  for (tile::Schedule& s : w.c.tileIR.schedules)
    if (auto* t = std::get_if<tile::TiledContraction>(&s); t && t->instruction == tile::TiledContraction::Instruction::Wgmma)
      t->tileM = 256, t->tileN = 32;
  EXPECT_TRUE(tile::stackOperands(w.c.tileIR));
  EXPECT_TRUE(tile::overlapWgmma(w.c.tileIR));
  EXPECT_TRUE(tile::tmaCopies(w.c.tileIR));
  EXPECT_TRUE(tile::specializeWarps(w.c.tileIR, /*everywhere=*/true));
  tile::verify(w.c.tileIR);
  w.kernelIR = kernel::lowerFromTile(w.c.tileIR);
  kernel::verify(w.kernelIR);
  for (const kernel::Kernel& k : w.kernelIR.kernels)
    if (k.name.find("reduce_sum") != std::string::npos) {
      EXPECT_EQ(k.block[0], 4 * 128 + 32) << k.name;
    }
  expectMatchesTheLoopProgram(w, "tiles of 256 rows");
  kernel::kernel_test::expectNvccCompiles(w.kernelIR);
}

TEST(WarpgroupProducts, NvccCompilesBothForSm90a) {
  for (bool overlap : {false, true}) kernel::kernel_test::expectNvccCompiles(wgmmaProducts(overlap).kernelIR);
  kernel::kernel_test::expectNvccCompiles(wgmmaProducts(true, true, true, true).kernelIR);  // tma
}

}  // namespace
}  // namespace kiln
