// Kernel IR's thread-block clusters by hand: 4 blocks in clusters of 2; cluster c reads rows [8c, 8c + 8) of a [16][32]
// f32 tensor map, block r of the cluster copying rows 8c + 4r .. 8c + 4r + 3 and multicasting them into both blocks;
// every block waits for the whole slice on its own mbarrier and writes it out. The interpreter lands every block's part
// in each; it reports a copy whose operands differ across the cluster (a block's part read from an index that another
// block computed differently) and parts that a cluster's blocks issue from different statements. The verifier's rules,
// the emitted CUDA and nvcc for sm_90a; and tile-multicast-operands choosing clusters for a linear layer's tma product,
// multicasting its activations (A) or, where its tiles are wider than high, its weights (B).
#include <gtest/gtest.h>

#include "kernel_test_support.h"
#include "kiln/driver/pipeline.h"
#include "kiln/frontend/frontend.h"
#include "kiln/kernel/lower.h"
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::kernel {
namespace {

using namespace kernel_test;

constexpr int64_t kRows = 16, kCols = 32, kPartRows = 4, kSlice = 2 * kPartRows * kCols;

enum class Fault { None, RankFromADefinedIndex, RanksTakeDifferentStatements, ClusterOfThree, NoCluster };

Program multicastCopy(Fault fault = Fault::None) {
  Kernel k;
  k.name = "k_cluster";
  k.block = {64, 1, 1};
  k.grid = {4, 1, 1};
  k.cluster = fault == Fault::ClusterOfThree ? 3 : fault == Fault::NoCluster ? 1 : 2;
  SharedBuffer bars{"bars", 1};
  bars.mbarriers = true;
  k.shared = {SharedBuffer{"tile", kSlice}, bars};
  k.tensorMaps = {TensorMap{kX, 0, kRows, kCols, kCols, kPartRows, kCols, false}};
  k.body.push_back(ifLess(threadIdx(), idxConst(1), {mbarrierInit(1, idxConst(0), 1), fenceProxyAsync(), fenceMbarrierInit()}));
  k.body.push_back(clusterBarrier());
  k.body.push_back(defIdx(2, "b", blockIdx()));
  const Idx b = idxVar(2, "b");
  // The block's rank: read from blockIdx itself, as it must be; the faulty row reads it from `b`, so that a block assumes
  // its partner copies the rows it copies itself (the partner then issues other rows than assumed).
  const Idx rank = mod(blockIdx(), 2), rowRank = fault == Fault::RankFromADefinedIndex ? mod(b, 2) : rank;
  auto copy = [&] {
    return tmaLoadMulticast(0, rank * idxConst(kPartRows * kCols), 0, idxConst(0),
                            floorDiv(b, 2) * idxConst(8) + rowRank * idxConst(kPartRows), 1, idxConst(0));
  };
  Block issue{mbarrierArriveExpectTx(1, idxConst(0), kSlice * 4)};
  if (fault == Fault::RanksTakeDifferentStatements)
    issue.push_back(ifLess(mod(blockIdx(), 2), idxConst(1), {copy()}));  // rank 0 here, rank 1 below
  else
    issue.push_back(copy());
  k.body.push_back(ifLess(threadIdx(), idxConst(1), std::move(issue)));
  if (fault == Fault::RanksTakeDifferentStatements)
    k.body.push_back(ifLess(threadIdx(), idxConst(1), {ifLess(idxConst(0), mod(blockIdx(), 2), {copy()})}));
  k.body.push_back(mbarrierWait(1, idxConst(0), idxConst(0)));
  for (int64_t i = 0; i < kSlice / 64; ++i) {
    Idx e = threadIdx() + idxConst(64 * i);
    k.body.push_back(storeGlobal(kY, blockIdx() * idxConst(kSlice) + e, loadShared(0, e)));
  }
  k.body.push_back(clusterBarrier());
  return program(kRows * kCols, 4 * kSlice, std::move(k));
}

TEST(KernelCluster, EveryBlockGetsTheWholeSliceFromItsClusterParts) {
  Program p = multicastCopy();
  verify(p);
  HostTensor x = ramp(kRows * kCols);
  auto out = interpret(p, {x});
  for (int64_t block = 0; block < 4; ++block)
    for (int64_t e = 0; e < kSlice; ++e)  // cluster block / 2 holds rows 8 (block / 2) .. + 7
      ASSERT_FLOAT_EQ(out[0].values[static_cast<size_t>(block * kSlice + e)], x.values[static_cast<size_t>(block / 2 * kSlice + e)])
          << block << " " << e;
  const std::string text = print(p);
  EXPECT_NE(text.find("cluster 2"), std::string::npos) << text;
  EXPECT_NE(text.find("tma.load.multicast shared tile[(blockIdx.x mod 2)*128] <- tmap0[row "), std::string::npos) << text;
  EXPECT_NE(text.find("cluster.barrier"), std::string::npos) << text;
  const std::string cu = cuda::emit(p).sources[0].text;
  EXPECT_NE(cu.find("__cluster_dims__(2, 1, 1) k_cluster("), std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::tma_load_2d(&tile[(blockIdx.x % 2)*128], &tmap0, 0, "), std::string::npos) << cu;
  EXPECT_NE(cu.find(", &bars[0], 3);"), std::string::npos) << cu;  // both blocks of the cluster
  EXPECT_NE(cu.find("kiln::cluster_barrier();"), std::string::npos) << cu;
  EXPECT_NE(cu.find("kiln::fence_mbarrier_init();"), std::string::npos) << cu;
  expectNvccCompiles(p);  // sm_90a
}

TEST(KernelCluster, CopiesThatDifferAcrossTheClusterAreReported) {
  Program p = multicastCopy(Fault::RankFromADefinedIndex);
  verify(p);
  std::string msg = errorOf([&] { interpret(p, {ramp(kRows * kCols)}); });
  EXPECT_NE(msg.find("multicast tma.load differs across the cluster"), std::string::npos) << msg;
  p = multicastCopy(Fault::RanksTakeDifferentStatements);
  verify(p);
  msg = errorOf([&] { interpret(p, {ramp(kRows * kCols)}); });
  EXPECT_NE(msg.find("never ran its multicast tma.load on shared tile"), std::string::npos) << msg;
}

TEST(KernelCluster, VerifierRules) {
  std::string msg = errorOf([&] { verify(multicastCopy(Fault::ClusterOfThree)); });
  EXPECT_NE(msg.find("a cluster of 3 blocks in a grid of (4, 1, 1)"), std::string::npos) << msg;
  msg = errorOf([&] { verify(multicastCopy(Fault::NoCluster)); });
  EXPECT_NE(msg.find("in a kernel without a thread-block cluster"), std::string::npos) << msg;
  Kernel k;  // a cluster barrier alone, on a target without clusters
  k.name = "k_barrier";
  k.block = {32, 1, 1};
  k.grid = {2, 1, 1};
  k.body = {clusterBarrier(), storeGlobal(kY, blockIdx(), loadGlobal(kX, blockIdx()))};
  Program p = program(2, 2, std::move(k));
  verify(p);
  p.target = targetFor("sm_80");
  msg = errorOf([&] { verify(p); });
  EXPECT_NE(msg.find("thread-block clusters on sm_80, which has none"), std::string::npos) << msg;
}

// Where the pipeline gives clusters: tile-specialize-warps (which tile-multicast-operands needs) takes only compute-bound
// products whose blocks are alone on their SMs and walk 32 or more slices. mlp_bf16_wide's products at 64 tokens (3
// slices, memory-bound) keep the block-barrier ring; forced on them (specializeWarps everywhere), the gate/up product
// runs in clusters of 2 with a producer warp, the interpreter lands both blocks' parts of every A slice, and the result is
// the Loop program's.
TEST(KernelCluster, LinearLayerProductMulticastsItsActivations) {
  Compiled c = compileModel(test::fixturePath("mlp_bf16_wide"), {}, {}, "tile");
  for (size_t i = 0; i < c.tileIR.schedules.size(); ++i)
    if (auto* t = std::get_if<tile::TiledContraction>(&c.tileIR.schedules[i])) {
      EXPECT_FALSE(t->producerWarp);
      EXPECT_EQ(t->cluster, 1);
      EXPECT_FALSE(tile::computeBound(c.tileIR.target, *t, tile::contractionOf(*t, c.tileIR.loop.kernels[i])));
    }
  ASSERT_TRUE(tile::specializeWarps(c.tileIR, /*everywhere=*/true));
  ASSERT_TRUE(tile::multicastOperands(c.tileIR));
  tile::verify(c.tileIR);
  Program k = lowerFromTile(c.tileIR);
  verify(k);
  // The lowering copies whole slices in each block and marks the shared operand's map; kernel-multicast-operands shares them.
  EXPECT_EQ(print(k).find("tma.load.multicast"), std::string::npos);
  EXPECT_NE(print(k).find(", multicast in 2 parts"), std::string::npos);
  ASSERT_TRUE(multicastOperands(k));
  verify(k);
  EXPECT_NE(print(k).find("tma.load.multicast"), std::string::npos);
  EXPECT_NE(print(k).find("mbarrier.arrive.cluster"), std::string::npos);
  EXPECT_EQ(print(k).find("multicast in"), std::string::npos);
  int clustered = 0;
  for (const tile::Schedule& s : c.tileIR.schedules)
    if (auto* t = std::get_if<tile::TiledContraction>(&s); t && t->cluster > 1) ++clustered;
  int multicast = 0;
  for (const Kernel& kernel : k.kernels) multicast += kernel.cluster > 1;
  EXPECT_EQ(multicast, clustered);
  ASSERT_GT(clustered, 0) << "the gate/up product of mlp_bf16_wide has an even number of tile columns";
  auto inputs = test::randomInputs(k, 3);
  auto got = interpret(k, inputs);
  auto want = loop::interpret(c.loopIR, inputs);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(compare(got[i], want[i]).relL2, 1e-3) << i;
}

// Clusters that multicast B: mlp_bf16_wide at 128 tokens, its down product (m 128, n 192, k 512) in tiles of 64 x 64
// (2 tile rows, 3 tile columns: A's clusters would not divide them) with a producer warp: tile-multicast-operands gives
// it clusters of 2 blocks of one tile column that multicast their B slices, the blocks of a cluster take tile rows 0
// and 1 of a column, and the interpreter lands both blocks' halves of every B slice: the Loop program's result.
TEST(KernelCluster, WideTilesMulticastTheirWeights) {
  Compiled c = compileModel(test::fixturePath("mlp_bf16_wide"), {frontend::parseInputOverride("x=1x128x192:bf16")}, {}, "tile");
  auto* down = std::get_if<tile::TiledContraction>(&c.tileIR.schedules.back());
  ASSERT_TRUE(down && down->a.copy == tile::TiledContraction::Copy::Tma) << tile::print(c.tileIR);
  down->tileM = 64;
  down->tileN = 64;
  ASSERT_TRUE(tile::specializeWarps(c.tileIR, /*everywhere=*/true));
  ASSERT_TRUE(tile::multicastOperands(c.tileIR));
  tile::verify(c.tileIR);
  down = std::get_if<tile::TiledContraction>(&c.tileIR.schedules.back());
  EXPECT_EQ(down->cluster, 2);
  EXPECT_TRUE(down->multicastB);
  EXPECT_NE(tile::print(c.tileIR).find("clusters of 2 blocks (B multicast)"), std::string::npos) << tile::print(c.tileIR);
  Program k = lowerFromTile(c.tileIR);
  ASSERT_TRUE(multicastOperands(k));
  verify(k);
  EXPECT_EQ(k.kernels.back().cluster, 2);
  auto inputs = test::randomInputs(k, 4);
  auto got = interpret(k, inputs);
  auto want = loop::interpret(c.loopIR, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(compare(got[i], want[i]).relL2, 1e-3) << i;
  // The verifier refuses B multicast where the clusters do not divide the tile rows.
  tile::Program odd = c.tileIR;
  std::get<tile::TiledContraction>(odd.schedules.back()).tileM = 128;
  std::string msg;
  try {
    tile::verify(odd);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("dividing the 1 tiles along m"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln::kernel
