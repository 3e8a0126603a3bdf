// kernel-lower-from-tile for tma TiledContraction schedules (see passes/tile/tma_copies.cpp for why): pipelinedSteps' ring
// (lower_contraction_async.cpp), slice order and look-ahead, with every slice of every operand copied by one TMA
// instruction that thread 0 issues. Ring slot s has mbarrier full[s] (one arrival per phase: thread 0's
// arrive.expect_tx of the slice's bytes, which the copies then complete); slice i is the (i / depth)-th use of its slot.
//   thread 0: init full[0 .. depth), fence them for the async proxy; barrier
//   thread 0: expect_tx and the copies of slices 0 .. ahead - 1
//   for k0 in steps of tile_k (slice i):
//     wait for phase i / depth of full[i mod depth] (parity (i / depth) mod 2): slice i has landed
//     barrier: every warpgroup is done with the slice whose slot the next copies overwrite
//     thread 0: expect_tx and the copies of slice i + ahead, if it exists
//     multiply slice i (wgmma reads what TMA wrote without a proxy fence: both are the async proxy)
// The operand's tensor map views it as [rows][K] ([row][k] at offset + row * rowStride + k, tile::tmaView) in boxes of
// the slice (tile rows x tile_k = 64, 128-byte swizzle); rows and k past the matrix arrive as zeros. A split product's
// part reads k from its shift on (the map spans the whole row; the parts end on slice boundaries).
// Products in clusters (TiledContraction::cluster = C) have a producer warp (lower_contraction_specialized.cpp). Here
// each block copies its own slices; the map of the operand the cluster shares (A, or B with
// TiledContraction::multicastB) is marked `multicast in C parts`, and kernel-multicast-operands
// (passes/kernel/multicast_operands.cpp) then has block r of a cluster copy rows [r, r + 1) * rows / C of every slice
// into the same place in all C blocks, each block still arming its own full[s] with the whole slice's bytes.
// (Without a producer warp, thread 0 waiting for the other block's releases in the middle of the step measured slower
// everywhere; that path is gone. Measurements: docs/history.md, "Thread-block clusters and multicast".)
#include <fmt/format.h>

#include <algorithm>

#include "kernel_builder.h"
#include "kiln/support/error.h"
#include "kiln/tile/contraction.h"
#include "ring.h"

namespace kiln::kernel::detail {

bool KernelBuilder::multicastPart(const Tiling& t, const OperandSlice& o) {
  return t.s.cluster > 1 && o.staging == (t.s.multicastB ? &t.s.b : &t.s.a);
}

KernelBuilder::TmaRing KernelBuilder::tmaRing(const Tiling& t, const std::vector<OperandSlice>& operands, bool empty) {
  TmaRing r;
  const int64_t depth = t.s.pipelineDepth, tk = t.s.tileK, K = t.c.k, C = t.s.cluster;
  r.full = static_cast<int>(k_.shared.size());
  // After the ring in dynamic shared memory: a static buffer would come before the dynamic ones, and the ring's 1024-byte
  // alignment (the swizzle's) is only that of the dynamic region's start when nothing precedes it.
  k_.shared.push_back(SharedBuffer{"full", depth, DType::F32, true, true});
  k_.cluster = C;
  if (empty) {
    r.empty = static_cast<int>(k_.shared.size());
    k_.shared.push_back(SharedBuffer{"empty", depth, DType::F32, true, true});
  }
  k_.dynamicSharedBytes = k_.dynamicBuffersBytes();
  for (const OperandSlice& o : operands) {
    auto view = tile::tmaView(tp_.loop, lk_, o.value, o.rowAxis.var, o.kAxis.var);
    KILN_ASSERT(view, "kernel {}: a tma operand that is not a [row][k] view of a buffer", lk_.name);
    r.maps.push_back(static_cast<int>(k_.tensorMaps.size()));
    k_.tensorMaps.push_back(TensorMap{param(view->buffer, false), view->offset, view->rows > 0 ? view->rows : o.rowExtent,
                                      view->cols > 0 ? view->cols : K, view->rowStride, o.rows, tk, true,
                                      multicastPart(t, o) ? C : 0});
    auto inKernel = [](const Idx& shift) {
      return shift ? substitute(shift, [](int v, const std::string& name) { return idxVar(v + kFirstLoopVar, name); }) : idxConst(0);
    };
    r.shifts.push_back(inKernel(view->colShift));
    r.rowShifts.push_back(inKernel(view->rowShift));
    r.sliceBytes += o.rows * tk * dtypeBytes(k_.shared[o.buf].dtype);
  }
  return r;
}

void KernelBuilder::tmaIssue(const Tiling& t, const std::vector<OperandSlice>& operands, const TmaRing& r, const Idx& i,
                             const Idx& slot, Block& out) {
  const int64_t tk = t.s.tileK;
  const Idx kStart = r.sliceStart(i);
  auto put = [&](Stmt s) { out.push_back(t.s.producerWarp ? elected(std::move(s)) : std::move(s)); };  // the producer warp's lane
  put(mbarrierArriveExpectTx(r.full, slot, r.sliceBytes));
  for (size_t j = 0; j < operands.size(); ++j) {
    const OperandSlice& o = operands[j];
    const int64_t slotElements = o.slotStride > 0 ? o.slotStride : tile::sliceElements(*o.staging, o.rows, tk);
    Idx dst = simplify(slot * idxConst(slotElements) + idxConst(o.slotOffset), extents_);
    Idx row = simplify(o.tileIdx * idxConst(o.rows) + r.rowShifts[j], extents_);
    put(tmaLoad(o.buf, dst, r.maps[j], simplify(kStart + r.shifts[j], extents_), row, r.full, slot));
  }
}

void KernelBuilder::tmaSteps(Tiling& t, const std::vector<OperandSlice>& operands, const std::function<void(Block&)>& multiply) {
  if (t.s.producerWarp) return specializedTmaSteps(t, operands, multiply);
  const int64_t depth = t.s.pipelineDepth, tk = t.s.tileK, K = t.c.k, ahead = tile::copiesAhead(t.s);
  KILN_ASSERT(ahead >= 1, "kernel {}: a ring of {} slots with {} wgmma groups in flight copies nothing ahead", lk_.name, depth,
              t.s.mmaInFlight);
  KILN_ASSERT(t.s.cluster == 1, "kernel {}: clusters need a producer warp (tile-multicast-operands)", lk_.name);
  TmaRing r = tmaRing(t, operands, false);
  const int full = r.full;
  const Idx first = idxConst(1);  // `threadIdx < 1`: thread 0
  Block init;
  for (int64_t s = 0; s < depth; ++s) init.push_back(mbarrierInit(full, idxConst(s), 1));
  init.push_back(fenceProxyAsync());  // the initialised barriers are visible to the copies' completions
  k_.body.push_back(ifLess(threadIdx(), first, std::move(init)));
  k_.body.push_back(barrier());
  r.sliceStart = rotatedSlices(t);
  Block prologue;
  for (int64_t i = 0; i < ahead && i * tk < K; ++i) tmaIssue(t, operands, r, idxConst(i), idxConst(i), prologue);
  k_.body.push_back(ifLess(threadIdx(), first, std::move(prologue)));

  Block steps;
  Idx slice = floorDiv(t.k0, tk);
  const Ring ring{depth};
  t.ring = defVar(steps, "slot", ring.slot(slice), depth);
  steps.push_back(mbarrierWait(full, t.ring, ring.parity(slice)));
  steps.push_back(barrier());
  Block next;
  const Idx j = idxAdd(slice, ahead);  // the slice copied in this step
  Idx writeSlot = defVar(next, "next_slot", ring.slot(j), depth);
  tmaIssue(t, operands, r, j, writeSlot, next);
  Idx kNext = simplify(t.k0 + idxConst(ahead * tk), extents_);
  steps.push_back(ifLess(kNext, idxConst(K), Block{ifLess(threadIdx(), first, std::move(next))}));
  multiply(steps);
  k_.body.push_back(forLoop(t.k0->var, "k0", idxConst(0), idxConst(K), tk, std::move(steps)));
  if (t.s.mmaInFlight > 0) k_.body.push_back(wgmmaWait(0));  // the accumulators are final
}

// kHandedBatch vectors loaded at once, then added: a batch's loads in flight together (one at a time, each would wait
// for L2 in turn).
void KernelBuilder::addHandedTile(int partials, const std::function<Idx(int64_t)>& at, const std::vector<int>& accs, Block& out) {
  constexpr int64_t kHandedBatch = 8;  // vectors of a handed-over partial loaded before they are added (32 registers)
  const int64_t vectors = static_cast<int64_t>(accs.size()) / 4;
  std::vector<int> loaded;
  for (int64_t e = 0; e < 4 * std::min(kHandedBatch, vectors); ++e) loaded.push_back(slot(fmt::format("handed{}", e)));
  for (int64_t v0 = 0; v0 < vectors; v0 += kHandedBatch) {
    const int64_t batch = std::min(kHandedBatch, vectors - v0);
    for (int64_t v = 0; v < batch; ++v)
      out.push_back(kernel::loadVector(partials, at(v0 + v), {loaded.begin() + 4 * v, loaded.begin() + 4 * v + 4}));
    for (int64_t e = 0; e < 4 * batch; ++e) {
      const int a = accs[static_cast<size_t>(4 * v0 + e)];
      out.push_back(assign(a, fapply(Fn::Add, {fvar(a), fvar(loaded[static_cast<size_t>(e)])})));
    }
  }
}

}  // namespace kiln::kernel::detail
