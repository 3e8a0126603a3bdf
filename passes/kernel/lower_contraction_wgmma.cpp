// kernel-lower-from-tile for wgmma TiledContraction schedules (see passes/tile/warpgroup_products.cpp for why). The
// cp_async ring is pipelinedSteps' (lower_contraction_async.cpp) with swizzled_128b (or core_matrices) slots; per
// slice, after the thread's wait for its copies, fence.proxy.async makes them visible to the tensor cores' reads before
// the barrier.
//
// Warpgroup q (threads 128q .. 128q + 127) owns rows 64q .. 64q + 63 of the block tile and all tile_n columns of every
// stage. With stackedB (every stage reads one A) the slot holds the stages' B slices one after another and one
// wgmma.m64n{stages * tile_n}k16 per 16 of k multiplies them all, its accumulators the stages' in order. Per slice it issues, after wgmma.fence, for each 16 of k and each stage one wgmma.m64n{tile_n}k16 whose A
// is its 64 rows of the stage's A slice and whose B is the stage's whole B slice (swizzled: starting at column k of
// their first row, 8-row groups 512 elements apart; core matrices: 64 elements between neighbours in k, 8 * tile_k
// between neighbours in rows), then commits the group and waits until at most mmaInFlight groups are pending (the
// copies run that many slices less ahead, so none overwrites a ring slot a pending wgmma still reads). Thread 32w + l of the warpgroup (g = l / 4, t = l % 4) holds, per
// stage, accumulator 4j + e = output (row 16w + g + 8 (e / 2), column 8j + 2t + e % 2) of the warpgroup's 64 rows
// (kernel::wgmmaElement): tile_n / 2 accumulators per stage.
#include <fmt/format.h>

#include "kernel_builder.h"
#include "kiln/kernel/operand_layout.h"
#include "kiln/support/error.h"

namespace kiln::kernel::detail {

std::function<void(Block&)> KernelBuilder::multiplyOnWarpgroups(Tiling& t) {
  const int64_t n = t.s.tileN, groups = t.s.tileM / kWgmmaM;
  Idx group;
  if (t.s.producerWarp) {  // the role the warps branch on (the producer warp's threads, after the warpgroups, see groups)
    const int v = freshKernelVar();
    group = t.role = idxVar(v, "wg");
    extents_[v] = groups + 1;
    k_.body.push_back(defWarpUniform(v, "wg", floorDiv(threadIdx(), kWarpgroupThreads)));
  } else {
    group = defVar(k_.body, "wg", floorDiv(threadIdx(), kWarpgroupThreads), groups);
  }
  Idx warp = defVar(k_.body, "warp", mod(floorDiv(threadIdx(), 32), 4), 4);
  Idx lane = defVar(k_.body, "lane", mod(threadIdx(), 32), 32);
  Idx g = defVar(k_.body, "g", floorDiv(lane, 4), 8);
  Idx q = defVar(k_.body, "t", mod(lane, 4), 4);
  // acc[stage][4j + e], zeroed.
  std::vector<std::vector<int>> acc(lk_.stages.size());
  for (size_t st = 0; st < lk_.stages.size(); ++st)
    for (int64_t j = 0; j < n / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        acc[st].push_back(slot(fmt::format("c{}_{}_{}", st, j, e)));
        k_.body.push_back(assign(acc[st].back(), fconst(0.f)));
      }
  for (int64_t j = 0; j < n / 8; ++j)
    for (int e = 0; e < 4; ++e) {
      auto [dr, dc] = wgmmaElement(0, static_cast<int>(4 * j + e));  // thread 0's element; others add (16w + g, 2t)
      Idx row = t.tileM * idxConst(t.s.tileM) + group * idxConst(kWgmmaM) + warp * idxConst(16) + g + idxConst(dr);
      Idx col = t.tileN * idxConst(n) + q * idxConst(2) + idxConst(dc);
      Owned o{simplify(row, extents_), simplify(col, extents_), {}};
      for (size_t st = 0; st < lk_.stages.size(); ++st) o.acc.push_back(acc[st][static_cast<size_t>(4 * j + e)]);
      t.owned.push_back(std::move(o));
    }
  KILN_ASSERT(t.s.tileK % kWgmmaK == 0, "kernel {}: wgmma slices take tile_k a multiple of {}, not {}", lk_.name, kWgmmaK, t.s.tileK);
  const bool swizzled = t.s.a.layout == tile::TiledContraction::SharedLayout::Swizzled128;
  const Stmt::CoreMatrices layout = swizzled ? Stmt::CoreMatrices{0, kWgmmaOperandSwizzle.atom(), true} : Stmt::CoreMatrices{64, 8 * t.s.tileK};
  return [this, &t, n, group, layout, swizzled, acc](Block& steps) {
    const int64_t aSlot = tile::sliceElements(t.s.a, t.s.tileM, t.s.tileK), bSlot = tile::sliceElements(t.s.b, n, t.s.tileK);
    steps.push_back(wgmmaFence());
    for (int64_t kk = 0; kk < t.s.tileK; kk += kWgmmaK) {
      // Core matrix (row / 8, k / 8) of a slot starts at element (row / 8) * 8 * tile_k + (k / 8) * 64; swizzled,
      // the operand starts at column kk of its first row (the hardware applies the swizzle to the address).
      const int64_t kOffset = swizzled ? kk : kk / 8 * 64;
      Idx aStart = simplify(t.ring * idxConst(aSlot) + group * idxConst(kWgmmaM / 8 * layout.rowStride) + idxConst(kOffset), extents_);
      if (t.s.stackedB) {  // one wgmma over every stage's B, stacked in the slot; its accumulators the stages' in order
        const int64_t stages = static_cast<int64_t>(lk_.stages.size());
        Idx bStart = simplify(t.ring * idxConst(stages * bSlot) + idxConst(kOffset), extents_);
        std::vector<int> all;
        for (const std::vector<int>& a : acc) all.insert(all.end(), a.begin(), a.end());
        steps.push_back(wgmma(t.s.mmaType, t.sharedA[0], aStart, layout, t.sharedB[0], bStart, layout, stages * n, all));
        if (kk == 0) steps.back().as<op::Wgmma>().scaleD = t.accumulate;
        continue;
      }
      for (size_t st = 0; st < lk_.stages.size(); ++st) {
        Idx bStart = simplify(t.ring * idxConst(bSlot) + idxConst(kOffset), extents_);
        steps.push_back(wgmma(t.s.mmaType, t.sharedA[st], aStart, layout, t.sharedB[st], bStart, layout, n, acc[st]));
        if (kk == 0) steps.back().as<op::Wgmma>().scaleD = t.accumulate;
      }
    }
    steps.push_back(wgmmaCommit());
    steps.push_back(wgmmaWait(static_cast<int>(t.s.mmaInFlight)));
  };
}

}  // namespace kiln::kernel::detail
