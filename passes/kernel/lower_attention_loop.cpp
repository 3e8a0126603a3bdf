// kernel-lower-from-tile for FlashAttention schedules: the copies and the loop over the key steps (lower_attention.cpp
// describes the kernel and sets it up; lower_attention_step.cpp builds a step's parts). The prologue copies q and the
// first steps' k and v rows into the ring's slots; the loop then walks the steps the block's rows may see, either through
// the ring (a copy ring - 1 steps ahead, waited for by cp.async groups) or with the scores a step ahead
// (FlashAttention::scoresAhead: k and v in two slots each, k two steps ahead, v one).
#include <fmt/format.h>

#include <array>

#include "kernel_builder.h"
#include "ring.h"

namespace kiln::kernel::detail {

namespace {
// The statements of two independent blocks (neither reads what the other writes) in one, b's spread evenly among a's,
// each in its own order: nvcc schedules within a basic block from the order it is given, and a warp issues in order, so
// b's tensor-core work then issues between a's dependent steps rather than after them.
Block interleaved(Block a, Block b) {
  Block out;
  size_t taken = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    out.push_back(std::move(a[i]));
    for (const size_t due = (i + 1) * b.size() / a.size(); taken < due; ++taken) out.push_back(std::move(b[taken]));
  }
  for (; taken < b.size(); ++taken) out.push_back(std::move(b[taken]));
  return out;
}
}  // namespace

// cp.async of `rows` rows (from rowStart, rows past `limit` zero-filled) of operand `load` into buf at `at`: rows of
// `cols` elements along colVar, `stride` apart. Thread ct copies 16-byte chunks ct, ct + threads, ...
// With `swizzled` (operands a wgmma reads: q and k for the scores, v for P·V; cols a multiple of 64) the slice is, per
// block of 64 columns h, rows of 64 elements under the 128-byte swizzle instead: element (r, c) at h * rows * 64 +
// r * 64 + ((c mod 64) / 8 ^ r mod 8) * 8 + c mod 8, and chunk e is block e div (8 rows), row (e div 8) mod rows,
// chunk e mod 8 of the row's 64 columns: a warp fills 4 whole rows (no bank conflicts), and wgmma reads it without the
// conflicts of 8 x 8 core matrices laid side by side (30 % slower P·V on the H200, 18ce6e8).
void KernelBuilder::flashCopyRows(const Flash& x, Block& out, int buf, const Idx& at, const loop::Expr& load, int rowVar,
                                  int64_t limit, const Idx& rowStart, int64_t rows, int colVar, int64_t cols, int64_t stride,
                                  bool swizzled) {
  const int64_t threads = x.threads;
  const Idx& ct = x.copyThread;
  const int64_t perCopy = Target::kVectorBytes / dtypeBytes(x.operandType);  // elements of one 16-byte copy
  const int64_t per = cols / perCopy, chunks = rows * per, bytes = Target::kVectorBytes;
  extents_[rowVar + kFirstLoopVar] = limit;
  extents_[colVar + kFirstLoopVar] = cols;
  const Idx source = flatIndex(load);
  // When the copies start at a multiple of `rows` below `limit` and `rows` divides `limit`, no row passes it (no clamp,
  // whole copies). Query heads sharing a block (tile-share-kv-heads) start at a multiple of fewer rows than they copy.
  const bool whole = limit % rows == 0 && provablyMultipleOf(rowStart, rows, extents_);
  auto chunk = [&](const Idx& e) {
    Idx r = simplify(swizzled ? mod(floorDiv(e, 8), rows) : floorDiv(e, per), extents_);
    Idx c = simplify(swizzled ? floorDiv(e, 8 * rows) * idxConst(64) + mod(e, 8) * idxConst(8) : mod(e, per) * idxConst(perCopy),
                     extents_);
    Idx to = simplify(swizzled ? at + floorDiv(e, 8 * rows) * idxConst(rows * 64) + r * idxConst(64) +
                                     idxXor(mod(e, 8), mod(r, 8)) * idxConst(8)
                               : at + r * idxConst(stride) + c, extents_);
    Idx row = simplify(rowStart + r, extents_);
    Idx from = simplify(substitute(source, [&](int v, const std::string&) -> Idx {
                          return v == rowVar + kFirstLoopVar ? (whole ? row : idxMin(row, idxConst(limit - 1)))
                                 : v == colVar + kFirstLoopVar ? c : nullptr;
                        }), extents_);
    Idx valid = whole ? idxConst(bytes)
                      : simplify(idxMin(idxMax(idxMul(idxAdd(idxMul(row, -1), limit), bytes), idxConst(0)), idxConst(bytes)), extents_);
    return cpAsync(buf, to, param(load.buffer, false), from, static_cast<int>(bytes), valid);
  };
  if (chunks % threads == 0) {
    for (int64_t i = 0; i < chunks / threads; ++i) out.push_back(chunk(ct + idxConst(i * threads)));
    return;
  }
  int e = freshKernelVar();
  extents_[e] = chunks;
  out.push_back(forLoop(e, "e", ct, idxConst(chunks), threads, Block{chunk(idxVar(e, "e"))}));
}

// k's rows of key step `step` into ring slot `slot` (the copies of flashCopyRows), and v's.
void KernelBuilder::flashCopyKeys(const Flash& x, Block& out, const Idx& step, const Idx& slot) {
  flashCopyRows(x, out, x.kRing, simplify(slot * idxConst(x.slices.k), extents_), *x.operands.k, x.softmax->key.var, x.keys,
                simplify(step * idxConst(x.keyBlock), extents_), x.keyBlock, x.depthAxis.var, x.depth, x.slices.depthStride,
                x.schedule->scoresByWgmma);
}

void KernelBuilder::flashCopyValues(const Flash& x, Block& out, const Idx& step, const Idx& slot) {
  flashCopyRows(x, out, x.vRing, simplify(slot * idxConst(x.slices.v), extents_), *x.operands.v, x.softmax->key.var, x.keys,
                simplify(step * idxConst(x.keyBlock), extents_), x.keyBlock, x.widthAxis.var, x.width, x.slices.widthStride,
                x.schedule->valuesByWgmma);
}

// Prologue: q with the first step, then the next ring - 2 steps (those that exist), one commit group each. (Scores a
// step ahead: q with the first step's k only; the rest in flashStepsAhead.)
void KernelBuilder::flashPrologue(const Flash& x, Block& body) {
  const tile::FlashAttention& f = *x.schedule;
  const Idx &firstStep = x.firstStep, &endStep = x.endStep;
  flashCopyRows(x, body, x.qSlice, idxConst(0), *x.operands.q, x.queryAxis.var, x.queries, x.firstQuery, x.queryBlock,
                x.depthAxis.var, x.depth, x.slices.depthStride, f.scoresByWgmma);
  flashCopyKeys(x, body, firstStep, idxConst(0));
  if (!f.scoresAhead) flashCopyValues(x, body, firstStep, idxConst(0));
  body.push_back(cpAsyncCommit());
  for (int64_t i = 1; i + 1 < x.ringDepth && !f.scoresAhead; ++i) {
    Block ahead;
    flashCopyKeys(x, ahead, idxAdd(firstStep, i), idxConst(i));
    flashCopyValues(x, ahead, idxAdd(firstStep, i), idxConst(i));
    body.push_back(ifLess(idxAdd(firstStep, i), endStep, std::move(ahead)));
    body.push_back(cpAsyncCommit());
  }
}

// q's fragments of every row group and depth step by ldmatrix.x4 (resident: loaded once, before the scores need them).
void KernelBuilder::flashLoadQueries(const Flash& x, Block& out) {
  for (int64_t gr = 0; gr < x.groupsPerWarp; ++gr)
    for (int64_t kk = 0; kk < x.depthSteps; ++kk)
      out.push_back(ldmatrixPairs(x.qSlice, flashQueryFragment(x, gr, kk), false,
                                  x.queryFragments[static_cast<size_t>(gr * x.depthSteps + kk)]));
}

// The scores a step ahead (FlashAttention::scoresAhead): k of step s + 1 and v of step s in the slots of step s + 1
// and s (mod 2). Prologue: q and k of the first step landed, its scores into the ahead set; then v of the first step
// with k of the second (already issued), v of the second with k of the third.
void KernelBuilder::flashStepsAhead(const Flash& x, const Idx& st, int stepVar, Block& body) {
  const tile::FlashAttention& f = *x.schedule;
  const Idx &sBegin = x.firstStep, &sEnd = x.endStep;
  const std::vector<std::array<int, 4>>& s = x.scoreTiles;
  const int64_t keyTiles = x.keyTiles;
  std::vector<std::array<int, 4>> ahead(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    for (int c = 0; c < 4; ++c) ahead[i][c] = slot(fmt::format("sa{}_{}{}", i % static_cast<size_t>(keyTiles), c,
                                                               flashGroupSuffix(static_cast<int64_t>(i) / keyTiles)));
  flashCopyValues(x, body, sBegin, idxConst(0));
  {
    Block k1;
    flashCopyKeys(x, k1, idxAdd(sBegin, 1), idxConst(1));
    body.push_back(ifLess(idxAdd(sBegin, 1), sEnd, std::move(k1)));
  }
  body.push_back(cpAsyncCommit());
  body.push_back(cpAsyncWait(1));
  if (f.scoresByWgmma) body.push_back(fenceProxyAsync());  // the landed q and k become visible to wgmma's reads
  body.push_back(barrier());
  if (x.qResident && !f.scoresByWgmma) flashLoadQueries(x, body);
  flashProduct(x, idxConst(0), ahead, body);
  body.push_back(barrier());  // (every warp's k reads of slot 0 before its next copy)
  {
    Block v1, k2;
    flashCopyValues(x, v1, idxAdd(sBegin, 1), idxConst(1));
    flashCopyKeys(x, k2, idxAdd(sBegin, 2), idxConst(0));
    body.push_back(ifLess(idxAdd(sBegin, 1), sEnd, std::move(v1)));
    body.push_back(ifLess(idxAdd(sBegin, 2), sEnd, std::move(k2)));
    body.push_back(cpAsyncCommit());
  }
  // Step st: wait for its v and the next step's k; take the scores multiplied ahead, apply the score expression;
  // multiply the next step's scores, spread through this step's softmax; P·V; then (the slots free) copy v of step
  // st + 2 and k of step st + 3. The last step multiplies nothing ahead: it follows the loop, on its own.
  // By wgmma: the next step's group is issued first (before the score expression: it reads only shared memory and
  // the ahead set, just copied out) and waited for after P·V, before the barrier that frees its k slot.
  auto walkStep = [&](const Idx& at, bool last, Block& step) {
    const Ring pair{2};  // k of the next step and v of this one: two slots each
    Idx vSlot = defVar(step, last ? "last_slot" : "slot", pair.slot(at + idxMul(sBegin, -1)), 2);
    step.push_back(cpAsyncWait(1));
    if (x.wgmmaReads) step.push_back(fenceProxyAsync());  // the next step's k and this step's v become visible to wgmma's reads
    step.push_back(barrier());
    for (size_t i = 0; i < s.size(); ++i)
      for (int c = 0; c < 4; ++c) step.push_back(assign(s[i][c], fvar(ahead[i][c])));
    auto nextSlot = [&] { return defVar(step, "next_slot", pair.slot(at + idxMul(sBegin, -1) + idxConst(1)), 2); };
    Idx kSlot;
    if (!last && f.scoresByWgmma) {
      kSlot = nextSlot();
      flashProduct(x, kSlot, ahead, step, false);
    }
    flashScores(x, at, step);
    Block softmax, next;
    flashSoftmax(x, softmax);
    if (!last && !f.scoresByWgmma) {
      kSlot = nextSlot();
      flashProduct(x, kSlot, ahead, next);
    }
    Block both = interleaved(std::move(softmax), std::move(next));
    step.insert(step.end(), both.begin(), both.end());
    flashValues(x, vSlot, step);
    if (last) return;
    if (f.scoresByWgmma) step.push_back(wgmmaWait(0));
    step.push_back(barrier());
    Block v2, k3;
    flashCopyValues(x, v2, idxAdd(at, 2), vSlot);
    flashCopyKeys(x, k3, idxAdd(at, 3), kSlot);
    step.push_back(ifLess(idxAdd(at, 2), sEnd, std::move(v2)));
    step.push_back(ifLess(idxAdd(at, 3), sEnd, std::move(k3)));
    step.push_back(cpAsyncCommit());
  };
  Block step, last;
  walkStep(st, false, step);
  body.push_back(forLoop(stepVar, "st", sBegin, idxAdd(sEnd, -1), 1, std::move(step)));
  walkStep(idxAdd(sEnd, -1), true, last);
  body.push_back(ifLess(sBegin, sEnd, std::move(last)));  // (every block's rows see some key: always)
}

// The ring's steps: step st copies step st + ring - 1 into its slot, waits for its own, and runs its parts.
void KernelBuilder::flashRingSteps(const Flash& x, const Idx& st, int stepVar, Block& body) {
  const tile::FlashAttention& f = *x.schedule;
  const Idx &sBegin = x.firstStep, &sEnd = x.endStep;
  const int64_t R = x.ringDepth;
  Block step;
  const Ring kv{R};
  Idx ring = defVar(step, "slot", kv.slot(st + idxMul(sBegin, -1)), R);
  {
    Block next;
    Idx nextSlot = defVar(next, "next_slot", kv.slot(st + idxMul(sBegin, -1) + idxConst(R - 1)), R);
    flashCopyKeys(x, next, idxAdd(st, R - 1), nextSlot);
    flashCopyValues(x, next, idxAdd(st, R - 1), nextSlot);
    step.push_back(ifLess(idxAdd(st, R - 1), sEnd, std::move(next)));
  }
  step.push_back(cpAsyncCommit());
  step.push_back(cpAsyncWait(static_cast<int>(R - 1)));
  if (x.wgmmaReads) step.push_back(fenceProxyAsync());  // the landed q, k and v become visible to wgmma's reads
  step.push_back(barrier());
  if (!x.onCudaCores && x.qResident && !f.scoresByWgmma) {
    Block loadQ;
    flashLoadQueries(x, loadQ);
    step.push_back(ifLess(st, idxAdd(sBegin, 1), std::move(loadQ)));
  }
  flashProduct(x, ring, x.scoreTiles, step);
  flashScores(x, st, step);
  flashSoftmax(x, step);
  flashValues(x, ring, step);
  step.push_back(barrier());
  body.push_back(forLoop(stepVar, "st", sBegin, sEnd, 1, std::move(step)));
}

}  // namespace kiln::kernel::detail
