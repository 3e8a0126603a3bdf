// kernel-lower-from-tile for CUDA-core products that stream f32 slices (instruction ffma, copy cp_async, layout rows_f32;
// see passes/tile/stream_ffma_products.cpp for why). The ring is pipelinedSteps' (lower_contraction_async.cpp): slot i
// holds slice i of each operand as [row][tile_k + 4] f32, k contiguous as in memory.
//
// Thread (tx, ty) of the gx x gy thread grid (gx = tile_n / micro_n, gy = tile_m / micro_m) owns rows ty + i gy and
// columns tx + j gx of the tile. Where the grid allows (gx a multiple of 8, gy of 4) each warp is an 8 x 4 patch of it,
// so one vector load of B rows by a warp touches 8 consecutive rows (the 4-float padding puts them in distinct banks)
// and one of A rows 4 consecutive rows. Lane bits 0, 2, 3 make tx, bits 1, 4 make ty: lanes l and l ^ 1 read the same
// A row and lanes l and l ^ 2 the same B row, and a 16-byte shared load whose lanes pair up that way returns in two
// passes of shared memory's 128 bytes per cycle rather than four (with l mod 8 for tx, every B load took four: shared
// memory, not the multiply-adds, bounded these products at about half the SM's rate on the H200).
// Per 4 of k, a thread loads each of its micro_m A rows and micro_n B rows as one 16-byte vector (4 k values), then
// issues micro_m x micro_n x 4 fused multiply-adds: 16 multiply-adds per shared load at 8 x 8.
#include <fmt/format.h>

#include <map>

#include "kernel_builder.h"
#include "kiln/support/error.h"

namespace kiln::kernel::detail {

std::function<void(Block&)> KernelBuilder::multiplyOnCudaCoresStreamed(Tiling& t) {
  const int64_t um = t.s.microM, un = t.s.microN, gx = t.s.tileN / un, gy = t.s.tileM / um;
  KILN_ASSERT(t.s.tileK % 4 == 0, "kernel {}: streamed CUDA-core slices are read 4 deep, not tile_k {}", lk_.name, t.s.tileK);
  Idx tx, ty;
  if (gx % 8 == 0 && gy % 4 == 0) {
    Idx warp = defVar(k_.body, "warp", floorDiv(threadIdx(), 32), gx * gy / 32);
    Idx lane = defVar(k_.body, "lane", mod(threadIdx(), 32), 32);
    tx = defVar(k_.body, "tx", mod(warp, gx / 8) * idxConst(8) + mod(lane, 2) + mod(floorDiv(lane, 4), 4) * idxConst(2), gx);
    ty = defVar(k_.body, "ty", floorDiv(warp, gx / 8) * idxConst(4) + mod(floorDiv(lane, 2), 2) + floorDiv(lane, 16) * idxConst(2), gy);
  } else {
    tx = defVar(k_.body, "tx", mod(threadIdx(), gx), gx);
    ty = defVar(k_.body, "ty", floorDiv(threadIdx(), gx), gy);
  }
  std::vector<std::vector<int>> acc = cudaCoreAccumulators(t, tx, ty);
  // Registers for one 4-deep step: 4 values per A row (per distinct A buffer) and per B row of each stage.
  std::map<int, std::vector<std::vector<int>>> aRegs;
  std::vector<std::vector<std::vector<int>>> bRegs(lk_.stages.size());
  for (size_t st = 0; st < lk_.stages.size(); ++st) {
    if (!aRegs.count(t.sharedA[st]))
      for (int64_t i = 0; i < um; ++i) {
        aRegs[t.sharedA[st]].emplace_back();
        for (int c = 0; c < 4; ++c) aRegs[t.sharedA[st]].back().push_back(slot(fmt::format("a{}_{}_{}", st, i, c)));
      }
    for (int64_t j = 0; j < un; ++j) {
      bRegs[st].emplace_back();
      for (int c = 0; c < 4; ++c) bRegs[st].back().push_back(slot(fmt::format("b{}_{}_{}", st, j, c)));
    }
  }
  return [this, &t, um, un, gx, gy, tx, ty, acc, aRegs, bRegs](Block& steps) {
    KILN_ASSERT(t.ring, "kernel {}: streamed CUDA-core slices are read from a cp_async ring", lk_.name);
    int kkVar = freshKernelVar();
    Idx kk = idxVar(kkVar, "kk");
    extents_[kkVar] = t.s.tileK;
    auto at = [&](const tile::TiledContraction::Operand& o, int64_t rows, const Idx& r) {
      return simplify(t.ring * idxConst(tile::sliceElements(o, rows, t.s.tileK)) + tile::sliceSlot(o, kk, r, rows, t.s.tileK), extents_);
    };
    Block inner;
    std::map<int, bool> loadedA;
    for (size_t st = 0; st < lk_.stages.size(); ++st) {
      const std::vector<std::vector<int>>& a = aRegs.at(t.sharedA[st]);
      if (!loadedA[t.sharedA[st]]) {
        loadedA[t.sharedA[st]] = true;
        for (int64_t i = 0; i < um; ++i)
          inner.push_back(loadSharedVector(t.sharedA[st], at(t.s.a, t.s.tileM, ty + idxConst(i * gy)), a[static_cast<size_t>(i)]));
      }
      for (int64_t j = 0; j < un; ++j)
        inner.push_back(loadSharedVector(t.sharedB[st], at(t.s.b, t.s.tileN, tx + idxConst(j * gx)), bRegs[st][static_cast<size_t>(j)]));
      for (int c = 0; c < 4; ++c)
        for (int64_t i = 0; i < um; ++i)
          for (int64_t j = 0; j < un; ++j) {
            inner.push_back(multiplyAdd(acc[st][static_cast<size_t>(i * un + j)], a[static_cast<size_t>(i)][static_cast<size_t>(c)],
                                        bRegs[st][static_cast<size_t>(j)][static_cast<size_t>(c)]));
          }
    }
    steps.push_back(forLoop(kkVar, "kk", idxConst(0), idxConst(t.s.tileK), 4, std::move(inner)));
  };
}

}  // namespace kiln::kernel::detail
