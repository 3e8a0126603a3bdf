// kernel-lower-from-tile for pipelined TiledContraction schedules (copy cp_async, fragments ldmatrix; see
// passes/tile/pipeline_async_copies.cpp for why). The ring holds pipelineDepth slices of every operand; slice i of
// the reduction (k from i * tile_k) lives in ring slot i mod depth. Per operand the slot is [row][tile_k + 8]
// (tile::sliceSlot's row_pairs layout), so each 16-byte copy and each ldmatrix row is 16-byte aligned and the
// eight rows one ldmatrix reads fall in distinct banks.
#include <fmt/format.h>

#include "kernel_builder.h"
#include "kiln/support/error.h"

namespace kiln::kernel::detail {

// Issues (without committing) the copies of operand o's slice at k in [kStart, kStart + tile_k) into ring slot
// ringSlot: thread t copies 16-byte chunks e = t, t + threads, ... (chunk e: row e / (tile_k / 8), k offset
// 8 * (e mod tile_k / 8)). Chunks outside the matrix (row >= rows of the operand, k >= K) read nothing and
// zero-fill (cp.async's src-size operand), their source address clamped inside the matrix.
void KernelBuilder::copySliceAsync(const Tiling& t, const OperandSlice& o, const Idx& kStart, const Idx& ringSlot, Block& out) {
  const loop::Expr* load = tile::plainLoad(o.value);
  KILN_ASSERT(load, "kernel {}: a cp_async operand that is not a plain load", lk_.name);
  const int64_t per = t.s.tileK / tile::kAsyncCopyElements, chunks = o.rows * per;
  const int64_t slotElements = tile::sliceElements(*o.staging, o.rows, t.s.tileK);
  int chunkVar = freshKernelVar();
  Idx e = idxVar(chunkVar, "e");
  extents_[chunkVar] = chunks;
  Block body;
  Idx kc = defVar(body, "kc", mod(e, per), per);
  Idx rr = defVar(body, "rr", floorDiv(e, per), o.rows);
  Idx row = simplify(o.tileIdx * idxConst(o.rows) + rr, extents_);
  Idx kAt = simplify(kStart + kc * idxConst(tile::kAsyncCopyElements), extents_);
  const int64_t K = t.c.k;
  body.push_back(defIdx(o.rowAxis.var + kFirstLoopVar, o.rowAxis.name, simplify(idxMin(row, idxConst(o.rowExtent - 1)), extents_)));
  extents_[o.rowAxis.var + kFirstLoopVar] = o.rowExtent;
  body.push_back(defIdx(o.kAxis.var + kFirstLoopVar, o.kAxis.name,
                        simplify(idxMin(kAt, idxConst(K - tile::kAsyncCopyElements)), extents_)));
  extents_[o.kAxis.var + kFirstLoopVar] = K;
  const int64_t bytes = tile::kAsyncCopyElements * dtypeBytes(t.s.mmaType);
  // bytes while row < rows and k <= K - 8 (both multiples of 8 apart), else 0
  Idx rowsLeft = idxMul(idxAdd(idxMul(row, -1), o.rowExtent), bytes);
  Idx kLeft = idxMul(idxAdd(idxMul(kAt, -1), K), dtypeBytes(t.s.mmaType));
  Idx valid = idxMin(idxMax(idxMin(rowsLeft, kLeft), idxConst(0)), idxConst(bytes));
  Idx dst = ringSlot * idxConst(slotElements) + tile::sliceSlot(*o.staging, kc * idxConst(tile::kAsyncCopyElements), rr, o.rows, t.s.tileK);
  body.push_back(cpAsync(o.buf, simplify(dst, extents_), param(load->buffer, false), flatIndex(*load), static_cast<int>(bytes),
                         simplify(valid, extents_)));
  out.push_back(forLoop(chunkVar, "e", threadIdx(), idxConst(chunks), k_.block[0], std::move(body)));
}

// The reduction loop of a pipelined product:
//   prologue: the copies of slices 0 .. depth-2, one commit group per slice
//   for k0 in steps of tile_k (slice i = k0 / tile_k):
//     wait until slice i's group has landed (depth - 2 younger groups may still be in flight); barrier: slice i is
//     visible to the block, and every thread is done with slice i - 1, whose ring slot is overwritten next
//     the copies of slice i + depth - 1 (if it exists) into slot (i + depth - 1) mod depth; commit (possibly empty)
//     multiply slice i from slot i mod depth
//   a final wait for the (empty) groups still open.
void KernelBuilder::pipelinedSteps(Tiling& t, const std::vector<OperandSlice>& operands, const std::function<void(Block&)>& multiply) {
  const int64_t depth = t.s.pipelineDepth, tk = t.s.tileK, K = t.c.k;
  for (int64_t i = 0; i + 1 < depth; ++i) {
    if (i * tk < K)
      for (const OperandSlice& o : operands) copySliceAsync(t, o, idxConst(i * tk), idxConst(i), k_.body);
    k_.body.push_back(cpAsyncCommit());
  }
  Block steps;
  const int kStepVar = t.k0->var;
  Idx slice = floorDiv(t.k0, tk);
  t.ring = defVar(steps, "slot", mod(slice, depth), depth);
  steps.push_back(cpAsyncWait(static_cast<int>(depth - 2)));
  steps.push_back(barrier());
  Idx kNext = simplify(t.k0 + idxConst((depth - 1) * tk), extents_);
  Block next;
  Idx writeSlot = defVar(next, "next_slot", mod(idxAdd(slice, depth - 1), depth), depth);
  for (const OperandSlice& o : operands) copySliceAsync(t, o, kNext, writeSlot, next);
  steps.push_back(ifLess(kNext, idxConst(K), std::move(next)));
  steps.push_back(cpAsyncCommit());
  multiply(steps);
  k_.body.push_back(forLoop(kStepVar, "k0", idxConst(0), idxConst(K), tk, std::move(steps)));
  k_.body.push_back(cpAsyncWait(0));
}

// ldmatrix.x4 lane roles (kernel::ldmatrix: lane 8j + r gives row r of matrix j; matrix j fills slots 2j, 2j + 1):
//   A (16 x 16 at the warp's mma row i): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
//   (rows 8-15, k 8-15) are a0a1, a2a3, a4a5, a6a7: lane l gives row l mod 16 at k offset 8 (l div 16).
//   B (n rows 16j .. 16j + 15 of the [n][k] slice, two 8-column mma tiles): matrices (n 0-7, k 0-7), (n 0-7,
//   k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) are b0b1, b2b3 of tile j and of tile j + 1: lane l gives n row
//   8 (l div 16) + l mod 8 at k offset 8 ((l div 8) mod 2).
void KernelBuilder::ldmatrixFragments(const Tiling& t, size_t stage, const Idx& kk, const Idx& lane, const Idx& warpRow,
                                      const Idx& warpCol, const std::vector<std::vector<int>>& a,
                                      const std::vector<std::vector<int>>& b, Block& out) {
  const int64_t wm = t.s.tileM / 2, wn = t.s.tileN / 2;
  auto at = [&](const tile::TiledContraction::Operand& o, int64_t rows, const Idx& r, const Idx& k) {
    return simplify(t.ring * idxConst(tile::sliceElements(o, rows, t.s.tileK)) + tile::sliceSlot(o, k, r, rows, t.s.tileK), extents_);
  };
  for (size_t i = 0; i < a.size(); ++i) {
    Idx r = warpRow * idxConst(wm) + idxConst(static_cast<int64_t>(i) * kMmaM) + mod(lane, 16);
    Idx k = kk + floorDiv(lane, 16) * idxConst(8);
    out.push_back(ldmatrix(t.sharedA[stage], at(t.s.a, t.s.tileM, r, k), 4, false, a[i]));
  }
  KILN_ASSERT(b.size() % 2 == 0, "kernel {}: ldmatrix B fragments come in pairs of mma columns, not {}", lk_.name, b.size());
  for (size_t j = 0; j < b.size(); j += 2) {
    Idx r = warpCol * idxConst(wn) + idxConst(static_cast<int64_t>(j) * kMmaN) + floorDiv(lane, 16) * idxConst(8) + mod(lane, 8);
    Idx k = kk + mod(floorDiv(lane, 8), 2) * idxConst(8);
    std::vector<int> slots = b[j];
    slots.insert(slots.end(), b[j + 1].begin(), b[j + 1].end());
    out.push_back(ldmatrix(t.sharedB[stage], at(t.s.b, t.s.tileN, r, k), 4, false, slots));
  }
}

}  // namespace kiln::kernel::detail
