// Row reductions by vectors (tile-vectorize-reductions, RowReduction::reductionVector): matrix-vector products lowered
// with each thread taking 16-byte vectors of the reduction axis -- in steps of 8 with an unguarded rest, with the last
// vector guarded where the threads do not divide the vectors, several rows to a block -- computed by the Kernel-IR
// interpreter equal the Loop IR's (f32 outputs: only the order of the f32 sums differs).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "kiln/kernel/ir.h"
#include "kiln/loop/ir.h"
#include "kiln/support/host_tensor.h"
#include "kiln/kernel/lower.h"
#include "kiln/tile/parser.h"
#include "test_support.h"

namespace kiln {
namespace {

// One product out[r] = sum_k x[k] * w[r, k] of `rows` outputs of `extent`, its operands inputs of type `type`, scheduled
// with `schedule` (the fields after "schedule row_reduction").
tile::Program product(int64_t rows, int64_t extent, const std::string& type, const std::string& schedule) {
  return tile::parse(fmt::format(R"(// kiln tile IR: gemv (target sm_90a, 132 SMs)
target sm_90a
buffer x : {2}[1x{1}] input
buffer w : {2}[{0}x{1}] input
buffer out0 : f32[1x{0}] output

kernel k0_reduce_sum writes out0  // aten::linear @ gemv.py:1
  schedule row_reduction {3}
  for p0 < 1, p1 < {0} parallel:
    acc0 = 0
    for r0 < {1} reduce:
      %0 = load x[0, r0]
      %1 = load w[p1, r0]
      %2 = mul(%0, %1)
      acc0 = sum(acc0, %2)
    store out0[p0, p1] = acc0

return out0
)",
                                 rows, extent, type, schedule));
}

void expectLoopResult(const tile::Program& t, const std::string& what) {
  tile::verify(t);
  const kernel::Program kp = kernel::lowerFromTile(t);
  kernel::verify(kp);
  const auto inputs = test::randomInputs(t.loop, 7);
  const auto got = kernel::interpret(kp, inputs);
  const auto want = loop::interpret(t.loop, inputs);
  ASSERT_EQ(got.size(), 1u);
  // Only the order of the f32 sums differs (1.2e-6 over 5,632 terms of random signs); a vector missed or taken twice
  // would be an error of the order of 1e-2.
  EXPECT_LE(compare(got[0], want[0]).relL2, 1e-5) << what;
}

TEST(ReductionVectors, StepsOfEightThenAnUnguardedRest) {  // 704 vectors a row, 22 a lane: 2 steps of 8, then 6
  expectLoopResult(product(16, 5632, "bf16", "threads_per_row=32 rows_per_block=8 combine=warp_shuffle reduction_vector=8"),
                   "bf16 5632");
}

TEST(ReductionVectors, TheLastVectorGuardedWhereTheThreadsDoNotDivideThem) {  // 130 vectors a row over 32 lanes
  expectLoopResult(product(8, 1040, "bf16", "threads_per_row=32 combine=warp_shuffle reduction_vector=8"), "bf16 1040");
}

TEST(ReductionVectors, SeveralWarpsARowCombineThroughSharedMemory) {  // f32: 4 a vector, 2 warps a row, 2 rows a block
  expectLoopResult(product(8, 2048, "f32", "threads_per_row=64 rows_per_block=2 combine=warp_shuffle reduction_vector=4"),
                   "f32 2048");
}

TEST(ReductionVectors, ThePassChoosesAndTheResultHolds) {
  tile::Program t = product(64, 1040, "bf16", "combine=warp_shuffle");
  ASSERT_TRUE(tile::vectorizeReductions(t));
  const auto& r = std::get<tile::RowReduction>(t.schedules[0]);
  EXPECT_EQ(r.reductionVector, 8);
  EXPECT_EQ(r.threadsPerRow, 64);  // 64 rows: too few for a warp each to fill 132 SMs; 130 vectors, at least 2 a lane
  expectLoopResult(t, "the pass's schedule");
  EXPECT_FALSE(tile::vectorizeReductions(t));  // a second run changes nothing
}

}  // namespace
}  // namespace kiln
