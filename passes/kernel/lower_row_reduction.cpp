// kernel-lower-from-tile for RowReduction schedules (kernel_builder.h). Block b handles rows b*R .. b*R + R - 1
// (R = rowsPerBlock), threadsPerRow threads (T) each; thread t of a row:
//   general form (vector 1, row not in registers): each stage's reduction axes flattened and strided by T (with
//     reductionVector V > 1: the stage's one axis as vectors of V consecutive elements, vector c = t, t + T, ...), the
//     partial results combined across the row, then the row's outputs strided by T;
//   row form (one axis per row, every stage spanning it): the row's W elements as W/V vectors of V; thread t
//     takes vectors t, t + T, ... . With rowInRegisters every load of those vectors is issued once, up front
//     (vector loads where consecutive and aligned) and serves every stage and the write; otherwise each stage and
//     the write loop over the vectors again.
// Combining across the row: WarpShuffle = butterfly shuffles within each warp, then (T > 32) each warp's total
// through shared memory `red` (a slot per warp) read back by every thread of the row; SharedTree = one slot per
// thread halved with a barrier per step (R = 1). Barriers are reached by every thread of the block.
#include <fmt/format.h>

#include "kernel_builder.h"
#include "kiln/support/error.h"
#include "kiln/tile/layout.h"

namespace kiln::kernel::detail {
namespace {

Fn combineFn(loop::ReduceFn fn) { return fn == loop::ReduceFn::Sum ? Fn::Add : Fn::Max; }

// Vectors of a reduction by vectors (RowReduction::reductionVector) whose loads a thread issues before it uses the
// first. ptxas still keeps only about three of them ahead of their use (SASS, docs/decode.md); the source asks for 8.
constexpr int64_t kReductionVectorsInFlight = 8;

}  // namespace

void KernelBuilder::combineAcrossRow(const tile::RowReduction& r, size_t stage, const Idx& rowInBlock, Block& out) {
  const int acc = accs_[stage];
  const Fn combine = combineFn(lk_.stages[stage].fn);
  const int64_t threads = r.threadsPerRow * r.rowsPerBlock;
  if (r.combine == tile::RowReduction::Combine::SharedTree) {
    out.push_back(storeShared(0, threadIdx(), fvar(acc)));
    out.push_back(barrier());
    for (int64_t half = threads / 2; half >= 1; half /= 2) {
      Block step{storeShared(0, threadIdx(), fapply(combine, {loadShared(0, threadIdx()), loadShared(0, threadIdx() + idxConst(half))}))};
      out.push_back(ifLess(threadIdx(), idxConst(half), std::move(step)));
      out.push_back(barrier());
    }
    out.push_back(assign(acc, loadShared(0, idxConst(0))));
    out.push_back(barrier());  // everyone has read the total before the next stage reuses `red`
    return;
  }
  const int tmp = slot(fmt::format("shfl{}", stage));
  if (r.threadsPerRow < Target::kWarpSize) {  // a row is threadsPerRow neighbouring lanes: the butterfly's last steps
    for (int mask = static_cast<int>(r.threadsPerRow) / 2; mask >= 1; mask /= 2) {
      out.push_back(shuffleXor(tmp, acc, mask));
      out.push_back(assign(acc, fapply(combine, {fvar(acc), fvar(tmp)})));
    }
    return;
  }
  for (Stmt& s : warpAllReduce(combine, acc, tmp)) out.push_back(std::move(s));
  const int64_t warpsPerRow = r.threadsPerRow / Target::kWarpSize;
  if (warpsPerRow == 1) return;
  // Lane 0 of each warp publishes the warp's total; every thread of the row then combines its row's warps.
  Idx warp = simplify(floorDiv(threadIdx(), Target::kWarpSize), extents_);
  Idx lane = simplify(mod(threadIdx(), Target::kWarpSize), extents_);
  out.push_back(ifLess(lane, idxConst(1), Block{storeShared(0, warp, fvar(acc))}));
  out.push_back(barrier());
  out.push_back(assign(acc, loadShared(0, simplify(rowInBlock * idxConst(warpsPerRow), extents_))));
  for (int64_t w = 1; w < warpsPerRow; ++w)
    out.push_back(assign(acc, fapply(combine, {fvar(acc), loadShared(0, simplify(rowInBlock * idxConst(warpsPerRow) + idxConst(w), extents_))})));
  out.push_back(barrier());  // everyone has read the totals before the next stage reuses `red`
}

void KernelBuilder::reduceByVectors(const tile::RowReduction& r, const std::vector<size_t>& stages, const Idx& t) {
  const loop::Reduction& red = lk_.stages[stages.front()];
  const int64_t threads = r.threadsPerRow, vectors = red.axes[0].extent / r.reductionVector;
  // Thread t takes vectors t, t + T, ...: in steps of `unroll` vectors whose loads are all issued before the first is
  // used (a loop of constant trip count; one strided by T from t is a loop the compiler does not unroll, one load in
  // flight per thread), then the rest, the last of them guarded where T does not divide the vectors.
  const int64_t perThread = tile::ceilDiv(vectors, threads), unroll = std::min<int64_t>(perThread, kReductionVectorsInFlight);
  int64_t steps = perThread / unroll, rest = perThread % unroll;
  if (rest == 0 && vectors % threads != 0) {
    --steps;
    rest = unroll;
  }
  const std::string prefix = lk_.stages.size() > 1 ? fmt::format("s{}", stages.front()) : "";
  if (steps > 1) {
    const int jv = freshKernelVar();
    extents_[jv] = steps;
    Block body;
    takeVectors(stages, t + idxVar(jv, "j") * idxConst(unroll * threads), threads, unroll, false, prefix + "c", body);
    k_.body.push_back(forLoop(jv, "j", idxConst(0), idxConst(steps), 1, std::move(body)));
  } else if (steps == 1) {
    takeVectors(stages, t, threads, unroll, false, prefix + "c", k_.body);
  }
  if (rest > 0)
    takeVectors(stages, t + idxConst(steps * unroll * threads), threads, rest, vectors % threads != 0, prefix + "d", k_.body);
}

void KernelBuilder::takeVectors(const std::vector<size_t>& stages, const Idx& first, int64_t stride, int64_t count,
                                bool guardLast, const std::string& name, Block& out) {
  const int64_t vector = std::get<tile::RowReduction>(s_).reductionVector;
  const int64_t vectors = lk_.stages[stages.front()].axes[0].extent / vector;
  Cse cse;
  // copies[u][i]: the V elements of vector u of stage stages[i]
  std::vector<std::vector<std::vector<loop::ExprP>>> copies;
  std::vector<Idx> at;
  for (int64_t u = 0; u < count; ++u) {  // the vectors' positions and loads first, all in flight together
    const int cv = freshLoopVar();
    const std::string n = fmt::format("{}{}", name, u);
    out.push_back(defIdx(cv + kFirstLoopVar, n, simplify(first + idxConst(u * stride), extents_)));
    extents_[cv + kFirstLoopVar] = tile::ceilDiv(vectors, stride) * stride;
    at.push_back(idxVar(cv + kFirstLoopVar, n));
    copies.emplace_back();
    for (size_t st : stages) {
      const loop::Reduction& red = lk_.stages[st];
      copies.back().emplace_back();
      for (int64_t v = 0; v < vector; ++v)
        copies.back().back().push_back(atAxis(red.value, red.axes[0].var, idxVar(cv, n) * idxConst(vector) + idxConst(v)));
      if (!(guardLast && u + 1 == count)) vectorLoads(copies.back().back(), out, cse);
    }
  }
  for (int64_t u = 0; u < count; ++u) {
    const bool guard = guardLast && u + 1 == count;
    Block guarded;
    Block& to = guard ? guarded : out;
    for (size_t i = 0; i < stages.size(); ++i) {
      const std::vector<loop::ExprP>& elements = copies[static_cast<size_t>(u)][i];
      if (guard) vectorLoads(elements, to, cse);
      const int acc = accs_[stages[i]];
      for (const loop::ExprP& e : elements) {
        FE value = lower(e, to, cse);
        to.push_back(assign(acc, fapply(combineFn(lk_.stages[stages[i]].fn), {fvar(acc), value})));
      }
    }
    if (guard) out.push_back(ifLess(at[static_cast<size_t>(u)], idxConst(vectors), std::move(guarded)));
  }
}

void KernelBuilder::rowReduction(const tile::RowReduction& r) {
  const int64_t rows = tile::rowsOf(lk_), perRow = tile::rowWidth(lk_), threads = tile::threadsPerBlock(r);
  k_.block = {threads, 1, 1};
  k_.grid = {tile::gridBlocks(r, lk_), 1, 1};
  extents_[kThreadIdx] = threads;
  extents_[kBlockIdx] = k_.grid[0];
  if (!lk_.stages.empty() && tile::combineSlots(r) > 0) k_.shared.push_back(SharedBuffer{"red", tile::combineSlots(r)});
  Idx t = threadIdx(), rowInBlock = idxConst(0), row = blockIdx();
  if (r.rowsPerBlock > 1) {
    t = defVar(k_.body, "t", mod(threadIdx(), r.threadsPerRow), r.threadsPerRow);
    rowInBlock = defVar(k_.body, "rb", floorDiv(threadIdx(), r.threadsPerRow), r.rowsPerBlock);
    row = defVar(k_.body, "row", blockIdx() * idxConst(r.rowsPerBlock) + rowInBlock, rows);
  }
  std::vector<loop::Axis> rowAxes(lk_.parallel.begin(), lk_.parallel.begin() + lk_.rowAxes);
  std::vector<loop::Axis> inner(lk_.parallel.begin() + lk_.rowAxes, lk_.parallel.end());
  unflatten(rowAxes, row, rows, k_.body);
  makeAccumulators();
  const bool rowForm = r.vector > 1 || r.rowInRegisters;
  if (!rowForm) {
    for (size_t st = 0; st < lk_.stages.size();) {
      std::vector<size_t> walk{st};  // the stages this walk of the axis accumulates: all of them, or this one
      for (size_t more = st + 1; r.stagesTogether && more < lk_.stages.size(); ++more) walk.push_back(more);
      for (size_t w : walk) k_.body.push_back(assign(accs_[w], fconst(tensor::reduceInit(lk_.stages[w].fn))));
      if (r.reductionVector > 1) {
        reduceByVectors(r, walk, t);
      } else {
        const loop::Reduction& red = lk_.stages[st];
        int64_t extent = 1;
        for (auto& a : red.axes) extent *= a.extent;
        Block body;
        extents_[kLinearVar] = extent;
        unflatten(red.axes, idxVar(kLinearVar, "j"), extent, body);
        accumulate(st, body);
        k_.body.push_back(forLoop(kLinearVar, "j", t, idxConst(extent), r.threadsPerRow, std::move(body)));
      }
      for (size_t w : walk) combineAcrossRow(r, w, rowInBlock, k_.body);
      st += walk.size();
    }
    Cse rowValues;
    hoistRowInvariants(lk_.result, k_.body, rowValues);
    Block write;
    extents_[kLinearVar] = perRow;
    unflatten(inner, idxVar(kLinearVar, "c"), perRow, write);
    storeResult(write, rowValues);
    k_.body.push_back(forLoop(kLinearVar, "c", t, idxConst(perRow), r.threadsPerRow, std::move(write)));
    return;
  }
  // Row form: element e of the row is the inner axis p and every stage's axis at e; vector c holds c*V .. c*V+V-1.
  const int64_t vector = r.vector, vectors = perRow / vector;
  const loop::Axis p = lk_.parallel.back();
  auto copiesAt = [&](const loop::ExprP& e, const Idx& c, int stageAxis) {
    std::vector<loop::ExprP> copies;
    for (int64_t v = 0; v < vector; ++v) {
      Idx at = c * idxConst(vector) + idxConst(v);
      copies.push_back(atAxis(stageAxis >= 0 ? atAxis(e, stageAxis, at) : e, p.var, at));
    }
    return copies;
  };
  // Runs `work(c, block)` for each vector c this thread takes: unrolled when the row sits in registers (a fixed
  // set of vectors, the last guarded where T does not divide them), else a loop strided by T.
  Cse shared;  // the loads (and values) of the row kept in registers across stages and the write
  auto forEachVector = [&](Block& out, const std::function<void(const Idx& c, Block& body, Cse& cse)>& work) {
    if (!r.rowInRegisters) {
      int cv = freshLoopVar();
      extents_[cv + kFirstLoopVar] = vectors;
      Block body;
      Cse cse;
      work(idxVar(cv, "c"), body, cse);
      out.push_back(forLoop(cv + kFirstLoopVar, "c", t, idxConst(vectors), r.threadsPerRow, std::move(body)));
      return;
    }
    for (int64_t j = 0; j * r.threadsPerRow < vectors; ++j) {
      const Idx c = idxVar(cVars_.at(static_cast<size_t>(j)), fmt::format("c{}", j));
      Block body;
      work(c, body, shared);
      if ((j + 1) * r.threadsPerRow > vectors)
        out.push_back(ifLess(idxVar(cVars_[static_cast<size_t>(j)] + kFirstLoopVar, fmt::format("c{}", j)), idxConst(vectors),
                             std::move(body)));
      else
        for (Stmt& s : body) out.push_back(std::move(s));
    }
  };
  if (r.rowInRegisters) {
    // Vector c_j = t + j*T of the row, defined once for every phase (the last ones guarded by c_j < W/V where used).
    for (int64_t j = 0; j * r.threadsPerRow < vectors; ++j) {
      cVars_.push_back(freshLoopVar());
      k_.body.push_back(defIdx(cVars_.back() + kFirstLoopVar, fmt::format("c{}", j), simplify(t + idxConst(j * r.threadsPerRow), extents_)));
      extents_[cVars_.back() + kFirstLoopVar] = (j + 1) * r.threadsPerRow;
    }
    // every load of the row's vectors, once
    forEachVector(k_.body, [&](const Idx& c, Block& body, Cse& cse) {
      for (size_t st = 0; st < lk_.stages.size(); ++st) vectorLoads(copiesAt(lk_.stages[st].value, c, lk_.stages[st].axes[0].var), body, cse);
      vectorLoads(copiesAt(lk_.result, c, -1), body, cse);
    });
  }
  for (size_t st = 0; st < lk_.stages.size(); ++st) {
    const loop::Reduction& red = lk_.stages[st];
    k_.body.push_back(assign(accs_[st], fconst(tensor::reduceInit(red.fn))));
    forEachVector(k_.body, [&](const Idx& c, Block& body, Cse& cse) {
      auto copies = copiesAt(red.value, c, red.axes[0].var);
      vectorLoads(copies, body, cse);
      for (const loop::ExprP& e : copies)
        body.push_back(assign(accs_[st], fapply(combineFn(red.fn), {fvar(accs_[st]), lower(e, body, cse)})));
    });
    combineAcrossRow(r, st, rowInBlock, k_.body);
  }
  hoistRowInvariants(lk_.result, k_.body, shared);
  forEachVector(k_.body, [&](const Idx& c, Block& body, Cse& cse) {
    Cse local = r.rowInRegisters ? Cse{} : shared;  // a loop body may reuse the hoisted row values
    Cse& use = r.rowInRegisters ? cse : local;
    auto copies = copiesAt(lk_.result, c, -1);
    vectorLoads(copies, body, use);
    std::vector<FE> values;
    for (const loop::ExprP& e : copies) values.push_back(lower(e, body, use));
    storeVector(values, outputIndexAt(p.var, c * idxConst(vector)), body);
  });
}

}  // namespace kiln::kernel::detail
