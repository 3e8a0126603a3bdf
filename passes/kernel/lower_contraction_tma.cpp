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
// In clusters (TiledContraction::cluster = C): block r of a cluster copies rows [r, r + 1) * rows / C of every A slice
// into the same place in all C blocks (multicast; the map's boxes are that high), each block still arms its own full[s]
// with the whole slice's bytes. A slot is refilled only once every block of the cluster is done with it: slot s also has
// mbarrier empty[s] of C arrivals per phase, one from each block (thread 0, after the step's block barrier, arrives on
// empty[s] of every block of the cluster), and thread 0 waits for it before copying into the slot again. Thread 0
// releases a slot in one step and refills it in the next (the copies run one slice less ahead), after the step's wgmmas
// are issued, so that the arrivals' trip between SMs is not on the step's path (untried on the GPU so far; see below):
//   for k0 (slice i): wait full[i mod depth]; barrier; multiply slice i; thread 0:
//     if slice i + ahead exists and its slot held slice i + ahead - depth: arrive on that slot's empty of every block
//     if i > 0 and slice j = i + ahead - 1 exists: if j >= depth, wait for phase j / depth - 1 of empty[j mod depth];
//       expect_tx and the copies of slice j
// The inits are fenced for the cluster and published by a cluster barrier; a last cluster barrier keeps every block alive
// until the others' copies and arrivals into it are done. (Measured on the H200, TinyLlama's q/k/v product at 128
// tokens, 10.0 us without clusters: a cluster barrier in every step instead of the empty barriers 21.4 us; the release,
// wait and refill of a slot in the same step 26.6 us, Nsight Compute finding every SM busy and the warps waiting at the
// block barrier for thread 0; bench/results/2026-12-03-h200-products-bf16-*-summary.txt. So tile-multicast-operands is
// off by default.)
#include <fmt/format.h>

#include "kernel_builder.h"
#include "kiln/support/error.h"
#include "kiln/tile/contraction.h"

namespace kiln::kernel::detail {

bool KernelBuilder::multicastPart(const Tiling& t, const OperandSlice& o) { return t.s.cluster > 1 && o.staging == &t.s.a; }

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
    k_.tensorMaps.push_back(TensorMap{param(view->buffer, false), view->offset, o.rowExtent, view->cols > 0 ? view->cols : K,
                                      view->rowStride, multicastPart(t, o) ? o.rows / C : o.rows, tk, true});
    r.shifts.push_back(view->colShift ? substitute(view->colShift, [](int v, const std::string& name) { return idxVar(v + kFirstLoopVar, name); })
                                      : idxConst(0));
    r.sliceBytes += o.rows * tk * dtypeBytes(k_.shared[o.buf].dtype);
  }
  return r;
}

void KernelBuilder::tmaIssue(const Tiling& t, const std::vector<OperandSlice>& operands, const TmaRing& r, const Idx& i,
                             const Idx& slot, Block& out) {
  const int64_t tk = t.s.tileK, C = t.s.cluster;
  const Idx kStart = r.sliceStart(i);
  auto put = [&](Stmt s) { out.push_back(t.s.producerWarp ? elected(std::move(s)) : std::move(s)); };  // the producer warp's lane
  put(mbarrierArriveExpectTx(r.full, slot, r.sliceBytes));
  for (size_t j = 0; j < operands.size(); ++j) {
    const OperandSlice& o = operands[j];
    const int64_t slotElements = o.slotStride > 0 ? o.slotStride : tile::sliceElements(*o.staging, o.rows, tk);
    Idx dst = simplify(slot * idxConst(slotElements) + idxConst(o.slotOffset), extents_);
    Idx row = simplify(o.tileIdx * idxConst(o.rows), extents_);
    if (multicastPart(t, o)) {  // this block's part, into every block of the cluster
      const int64_t part = o.rows / C;
      const Idx rank = mod(blockIdx(), C);  // the block's place in its cluster (clusters are consecutive blocks)
      put(tmaLoadMulticast(o.buf, simplify(dst + rank * idxConst(part * tk), extents_), r.maps[j],
                           simplify(kStart + r.shifts[j], extents_), simplify(row + rank * idxConst(part), extents_), r.full, slot));
      continue;
    }
    put(tmaLoad(o.buf, dst, r.maps[j], simplify(kStart + r.shifts[j], extents_), row, r.full, slot));
  }
}

void KernelBuilder::tmaSteps(Tiling& t, const std::vector<OperandSlice>& operands, const std::function<void(Block&)>& multiply) {
  if (t.s.producerWarp) return specializedTmaSteps(t, operands, multiply);
  const int64_t depth = t.s.pipelineDepth, tk = t.s.tileK, K = t.c.k, ahead = tile::copiesAhead(t.s);
  KILN_ASSERT(ahead >= 1, "kernel {}: a ring of {} slots with {} wgmma groups in flight copies nothing ahead", lk_.name, depth,
              t.s.mmaInFlight);
  const int64_t C = t.s.cluster;
  TmaRing r = tmaRing(t, operands, C > 1);
  const int full = r.full, empty = r.empty;
  const Idx first = idxConst(1);  // `threadIdx < 1`: thread 0
  Block init;
  for (int64_t s = 0; s < depth; ++s) init.push_back(mbarrierInit(full, idxConst(s), 1));
  for (int64_t s = 0; s < depth && C > 1; ++s) init.push_back(mbarrierInit(empty, idxConst(s), C));
  init.push_back(fenceProxyAsync());  // the initialised barriers are visible to the copies' completions
  if (C > 1) init.push_back(fenceMbarrierInit());  // ... and to the cluster's other blocks, whose copies complete on them
  k_.body.push_back(ifLess(threadIdx(), first, std::move(init)));
  k_.body.push_back(C > 1 ? clusterBarrier() : barrier());
  r.sliceStart = rotatedSlices(t);
  auto issue = [&](const Idx& i, const Idx& slot, Block& out) { tmaIssue(t, operands, r, i, slot, out); };
  Block prologue;
  for (int64_t i = 0; i < ahead && i * tk < K; ++i) issue(idxConst(i), idxConst(i), prologue);
  k_.body.push_back(ifLess(threadIdx(), first, std::move(prologue)));

  Block steps;
  Idx slice = floorDiv(t.k0, tk);
  t.ring = defVar(steps, "slot", mod(slice, depth), depth);
  steps.push_back(mbarrierWait(full, t.ring, mod(floorDiv(slice, depth), 2)));
  steps.push_back(barrier());
  Block next;
  const Idx j = idxAdd(slice, C > 1 ? ahead - 1 : ahead);  // the slice copied in this step
  Idx writeSlot = defVar(next, "next_slot", mod(j, depth), depth);
  if (C > 1)  // every block of the cluster is done with the slice the slot held (released in the step before)
    next.push_back(ifLess(idxConst(depth - 1), j, {mbarrierWait(empty, writeSlot, mod(idxAdd(floorDiv(j, depth), 1), 2))}));
  issue(j, writeSlot, next);
  if (C == 1) {
    Idx kNext = simplify(t.k0 + idxConst(ahead * tk), extents_);
    steps.push_back(ifLess(kNext, idxConst(K), Block{ifLess(threadIdx(), first, std::move(next))}));
    multiply(steps);
  } else {
    multiply(steps);
    const Idx released = idxAdd(slice, ahead);  // this block is done with the slice its slot held (the step's barrier)
    Block release;
    Idx releaseSlot = defVar(release, "free_slot", mod(released, depth), depth);
    release.push_back(mbarrierArriveCluster(empty, releaseSlot));
    const Idx slices = idxConst((K + tk - 1) / tk);
    Stmt reused = ifLess(idxConst(depth - 1), released, std::move(release));  // the slot held an earlier slice
    steps.push_back(ifLess(threadIdx(), first, {ifLess(released, slices, {std::move(reused)})}));
    // slice ahead - 1 came with the prologue
    steps.push_back(ifLess(threadIdx(), first, {ifLess(idxConst(0), slice, {ifLess(j, slices, std::move(next))})}));
  }
  k_.body.push_back(forLoop(t.k0->var, "k0", idxConst(0), idxConst(K), tk, std::move(steps)));
  if (t.s.mmaInFlight > 0) k_.body.push_back(wgmmaWait(0));  // the accumulators are final
  if (C > 1) k_.body.push_back(clusterBarrier());  // no block leaves while copies into it may still be on their way
}

}  // namespace kiln::kernel::detail
