// kernel-lower-from-tile for pipelined TiledContraction schedules (copy cp_async, fragments ldmatrix; see
// passes/tile/pipeline_async_copies.cpp for why). The ring holds pipelineDepth slices of every operand; slice i of
// the reduction (k from i * tile_k) lives in ring slot i mod depth. Per operand the slot is [row][tile_k + 8]
// (tile::sliceSlot's row_pairs layout), so each 16-byte copy and each ldmatrix row is 16-byte aligned and the
// eight rows one ldmatrix reads fall in distinct banks.
#include <fmt/format.h>

#include <map>
#include <set>

#include "kernel_builder.h"
#include "kiln/support/error.h"
#include "ring.h"

namespace kiln::kernel::detail {

// Issues (without committing) the copies of operand o's slice at k in [kStart, kStart + tile_k) into ring slot
// ringSlot: thread t copies 16-byte chunks e = t, t + threads, ... of c elements each (8 of bf16/f16, 4 of f32; chunk e:
// row e / (tile_k / c), k offset c * (e mod tile_k / c)); unrolled when the chunks divide evenly, so every index is affine
// in t and k0. Chunks outside the matrix (row >= rows of the operand, k >= K) read nothing and zero-fill (cp.async's
// src-size operand), their source address clamped inside the matrix.
void KernelBuilder::copySliceAsync(const Tiling& t, const OperandSlice& o, const Idx& kStart, const Idx& ringSlot, Block& out) {
  const loop::Expr* load = loop::plainLoad(o.value);
  KILN_ASSERT(load, "kernel {}: a cp_async operand that is not a plain load", lk_.name);
  const int64_t elementBytes = dtypeBytes(tile::sliceType(t.s, *o.staging)), chunk = 16 / elementBytes;  // elements per copy
  const int64_t per = t.s.tileK / chunk, chunks = o.rows * per, threads = k_.block[0];
  const int64_t slotElements = o.slotStride > 0 ? o.slotStride : tile::sliceElements(*o.staging, o.rows, t.s.tileK);
  const int64_t K = t.c.k, bytes = 16;
  const int rowVar = o.rowAxis.var + kFirstLoopVar, kVar = o.kAxis.var + kFirstLoopVar;
  extents_[rowVar] = o.rowExtent;
  extents_[kVar] = K;
  const Idx source = flatIndex(*load);  // over the operand's row and k variables, substituted per chunk below
  auto copyChunk = [&](const Idx& e) {
    Idx kc = simplify(mod(e, per), extents_), rr = simplify(floorDiv(e, per), extents_);
    Idx row = simplify(o.tileIdx * idxConst(o.rows) + rr, extents_);
    Idx kAt = simplify(kStart + kc * idxConst(chunk), extents_);
    Idx rowIn = idxMin(row, idxConst(o.rowExtent - 1)), kIn = idxMin(kAt, idxConst(K - chunk));
    Idx from = simplify(substitute(source, [&](int v, const std::string&) -> Idx {
                          return v == rowVar ? rowIn : v == kVar ? kIn : nullptr;
                        }), extents_);
    // `bytes` while row < rows and k <= K - chunk (both multiples of chunk apart), else 0
    Idx rowsLeft = idxMul(idxAdd(idxMul(row, -1), o.rowExtent), bytes);
    Idx kLeft = idxMul(idxAdd(idxMul(kAt, -1), K), elementBytes);
    Idx valid = simplify(idxMin(idxMax(idxMin(rowsLeft, kLeft), idxConst(0)), idxConst(bytes)), extents_);
    Idx dst = ringSlot * idxConst(slotElements) + idxConst(o.slotOffset) +
              tile::sliceSlot(*o.staging, kc * idxConst(chunk), rr, o.rows, t.s.tileK);
    return cpAsync(o.buf, simplify(dst, extents_), param(load->buffer, false), from, static_cast<int>(bytes), valid);
  };
  if (chunks % threads == 0) {  // unrolled: thread t copies chunks t, t + threads, ... (indices affine in t)
    for (int64_t i = 0; i < chunks / threads; ++i) out.push_back(copyChunk(t.copier + idxConst(i * threads)));
    return;
  }
  int chunkVar = freshKernelVar();
  extents_[chunkVar] = chunks;
  out.push_back(forLoop(chunkVar, "e", t.copier, idxConst(chunks), threads, Block{copyChunk(idxVar(chunkVar, "e"))}));
}

// Where the block's i-th slice of the reduction starts in k, the slices rotated by the block's tile column (defines
// k_first in the kernel's body when there is more than one slice; see pipelinedSteps for why).
std::function<Idx(const Idx&)> KernelBuilder::rotatedSlices(const Tiling& t) {
  const int64_t tk = t.s.tileK, slices = (t.c.k + tk - 1) / tk;
  if (slices == 1) return [this, tk](const Idx& i) { return simplify(i * idxConst(tk), extents_); };
  // A cluster's blocks (consecutive tile columns, or with B multicast one tile column) walk alike: they multicast each
  // other's slices.
  Idx rotation = defVar(k_.body, "k_first", mod(floorDiv(t.tileN, t.s.multicastB ? 1 : t.s.cluster), slices), slices);
  return [this, tk, slices, rotation](const Idx& i) { return simplify(mod(i + rotation, slices) * idxConst(tk), extents_); };
}

// The reduction loop of a pipelined product, with the copies `ahead` = depth - 1 - mmaInFlight slices ahead:
//   prologue: the copies of slices 0 .. ahead - 1, one commit group per slice
//   for k0 in steps of tile_k (slice i = k0 / tile_k):
//     wait until slice i's group has landed (ahead - 1 younger groups may still be in flight); barrier: slice i is
//     visible to the block, and every thread is done with slice i - 1 - mmaInFlight (its wgmmas waited for before
//     the barrier), whose ring slot is overwritten next
//     the copies of slice i + ahead (if it exists) into slot (i + ahead) mod depth; commit (possibly empty)
//     multiply slice i from slot i mod depth (wgmma: wait until at most mmaInFlight groups are pending)
//   a final wait for the wgmmas still in flight and the (empty) copy groups still open.
// Blocks walk the reduction's slices in a rotated order: the block of tile column tn starts at slice tn mod S (S slices;
// in clusters of C blocks, (tn div C) mod S) and wraps around. The blocks of one row of tiles all read the same A slices; in step, they would all ask the same few
// L2 lines for them at once (ncu on the H200: L2 64 % busy at 0.3 TB/s of DRAM traffic for TinyLlama's q/k/v product),
// rotated they spread over the whole of A.
void KernelBuilder::pipelinedSteps(Tiling& t, const std::vector<OperandSlice>& operands, const std::function<void(Block&)>& multiply) {
  const int64_t depth = t.s.pipelineDepth, tk = t.s.tileK, K = t.c.k, ahead = depth - 1 - t.s.mmaInFlight;
  KILN_ASSERT(ahead >= 1, "kernel {}: a ring of {} slots with {} wgmma groups in flight copies nothing ahead", lk_.name, depth,
              t.s.mmaInFlight);
  t.copier = defVar(k_.body, "ct", threadIdx(), k_.block[0]);
  const std::function<Idx(const Idx&)> sliceStart = rotatedSlices(t);
  for (int64_t i = 0; i < ahead; ++i) {
    if (i * tk < K)
      for (const OperandSlice& o : operands) copySliceAsync(t, o, sliceStart(idxConst(i)), idxConst(i), k_.body);
    k_.body.push_back(cpAsyncCommit());
  }
  Block steps;
  const int kStepVar = t.k0->var;
  Idx slice = floorDiv(t.k0, tk);
  const Ring ring{depth};
  t.ring = defVar(steps, "slot", ring.slot(slice), depth);
  steps.push_back(cpAsyncWait(static_cast<int>(ahead - 1)));
  // wgmma reads the slices through the async proxy: the thread's landed copies are fenced for it before the barrier.
  if (t.s.instruction == tile::TiledContraction::Instruction::Wgmma) steps.push_back(fenceProxyAsync());
  steps.push_back(barrier());
  Idx kNext = simplify(t.k0 + idxConst(ahead * tk), extents_);
  Block next;
  Idx writeSlot = defVar(next, "next_slot", ring.slotAhead(slice, ahead), depth);
  for (const OperandSlice& o : operands) copySliceAsync(t, o, sliceStart(idxAdd(slice, ahead)), writeSlot, next);
  steps.push_back(ifLess(kNext, idxConst(K), std::move(next)));
  steps.push_back(cpAsyncCommit());
  multiply(steps);
  k_.body.push_back(forLoop(kStepVar, "k0", idxConst(0), idxConst(K), tk, std::move(steps)));
  if (t.s.mmaInFlight > 0) k_.body.push_back(wgmmaWait(0));  // the accumulators are final
  k_.body.push_back(cpAsyncWait(0));
}

int KernelBuilder::pairReg(const std::string& name) {
  k_.pairVars.push_back(name);
  return static_cast<int>(k_.pairVars.size()) - 1;
}

// Per 16 of k: each stage's A fragments (a stage whose A is another's shared slice reuses that stage's registers)
// and B fragments by ldmatrix.x4 into pair registers, then one mma per (mma row, mma column) of the warp.
// ldmatrix.x4 lane roles (kernel::ldmatrix: lane 8j + r gives row r of matrix j, loaded into register j):
//   A (16 x 16 at the warp's mma row i): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
//   (rows 8-15, k 8-15) are a01, a23, a45, a67: lane l gives row l mod 16 at k offset 8 (l div 16).
//   B (n rows 16j .. 16j + 15 of the [n][k] slice, two 8-column mma tiles): matrices (n 0-7, k 0-7), (n 0-7,
//   k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) are b01, b23 of tile j and of tile j + 1: lane l gives n row
//   8 (l div 16) + l mod 8 at k offset 8 ((l div 8) mod 2).
void KernelBuilder::ldmatrixSteps(const Tiling& t, int64_t mi, int64_t ni, const Idx& lane, const Idx& warpRow, const Idx& warpCol,
                                  const std::vector<std::vector<int>>& acc, Block& out) {
  KILN_ASSERT(ni % 2 == 0, "kernel {}: ldmatrix B fragments come in pairs of mma columns, not {}", lk_.name, ni);
  const int64_t wm = t.s.tileM / 2, wn = t.s.tileN / 2;
  auto at = [&](const tile::TiledContraction::Operand& o, int64_t rows, const Idx& r, const Idx& k) {
    return simplify(t.ring * idxConst(tile::sliceElements(o, rows, t.s.tileK)) + tile::sliceSlot(o, k, r, rows, t.s.tileK), extents_);
  };
  // Registers: A per distinct A buffer, B per stage; reused by every k-step.
  std::map<int, std::vector<std::vector<int>>> aRegs;
  std::vector<std::vector<std::vector<int>>> bRegs(lk_.stages.size());
  for (size_t st = 0; st < lk_.stages.size(); ++st) {
    if (!aRegs.count(t.sharedA[st]))
      for (int64_t i = 0; i < mi; ++i) {
        aRegs[t.sharedA[st]].emplace_back();
        for (int r = 0; r < 4; ++r) aRegs[t.sharedA[st]].back().push_back(pairReg(fmt::format("ra{}_{}_{}", st, i, r)));
      }
    for (int64_t j = 0; j < ni; ++j) {
      bRegs[st].emplace_back();
      for (int r = 0; r < 2; ++r) bRegs[st].back().push_back(pairReg(fmt::format("rb{}_{}_{}", st, j, r)));
    }
  }
  for (int64_t step = 0; step < t.s.tileK / kMmaK; ++step) {
    const Idx kk = idxConst(step * kMmaK);
    std::set<int> loadedA;
    for (size_t st = 0; st < lk_.stages.size(); ++st) {
      const std::vector<std::vector<int>>& a = aRegs[t.sharedA[st]];
      if (loadedA.insert(t.sharedA[st]).second)
        for (int64_t i = 0; i < mi; ++i) {
          Idx r = warpRow * idxConst(wm) + idxConst(i * kMmaM) + mod(lane, 16);
          Idx k = kk + floorDiv(lane, 16) * idxConst(8);
          out.push_back(ldmatrixPairs(t.sharedA[st], at(t.s.a, t.s.tileM, r, k), false, a[static_cast<size_t>(i)]));
        }
      for (int64_t j = 0; j < ni; j += 2) {
        Idx r = warpCol * idxConst(wn) + idxConst(j * kMmaN) + floorDiv(lane, 16) * idxConst(8) + mod(lane, 8);
        Idx k = kk + mod(floorDiv(lane, 8), 2) * idxConst(8);
        std::vector<int> regs = bRegs[st][static_cast<size_t>(j)];
        regs.insert(regs.end(), bRegs[st][static_cast<size_t>(j + 1)].begin(), bRegs[st][static_cast<size_t>(j + 1)].end());
        out.push_back(ldmatrixPairs(t.sharedB[st], at(t.s.b, t.s.tileN, r, k), false, regs));
      }
      for (int64_t i = 0; i < mi; ++i)
        for (int64_t j = 0; j < ni; ++j) {
          std::vector<int> c(acc[st].begin() + (i * ni + j) * 4, acc[st].begin() + (i * ni + j) * 4 + 4);
          out.push_back(mmaFromPairs(t.s.mmaType, a[static_cast<size_t>(i)], bRegs[st][static_cast<size_t>(j)], c));
        }
    }
  }
}

}  // namespace kiln::kernel::detail
