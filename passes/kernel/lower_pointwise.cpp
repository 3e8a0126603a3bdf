// kernel-lower-from-tile for PointwiseMap schedules (kernel_builder.h): i = blockIdx.x*threads + threadIdx.x;
// if (i < points / vector) { the parallel indices of point i*vector; each reduction as a serial loop; the result
// of `vector` consecutive points of the innermost axis, read with vector loads where they are consecutive and
// aligned, written with vector stores }.
#include <fmt/format.h>

#include "kernel_builder.h"

namespace kiln::kernel::detail {

void KernelBuilder::pointwise(const tile::PointwiseMap& m) {
  const int64_t vector = m.vector, points = lk_.parallelPoints() / vector, block = m.threads;
  k_.block = {block, 1, 1};
  k_.grid = {tile::gridBlocks(s_, lk_), 1, 1};
  extents_[kThreadIdx] = block;
  extents_[kBlockIdx] = k_.grid[0];
  Idx linear = idxVar(kLinearVar, "i");
  k_.body.push_back(defIdx(kLinearVar, "i", blockIdx() * idxConst(block) + threadIdx()));
  extents_[kLinearVar] = points;
  Block guarded;
  if (vector > 1) {
    // The innermost axis is walked by its vector index q; copy v of the result reads point q*vector + v.
    std::vector<loop::Axis> axes = lk_.parallel;
    const loop::Axis inner = axes.back();
    axes.back() = loop::Axis{freshLoopVar(), "q", inner.extent / vector};
    unflatten(axes, linear, points, guarded);
    const Idx q = idxVar(axes.back().var, "q");
    std::vector<loop::ExprP> copies;
    for (int64_t v = 0; v < vector; ++v) copies.push_back(atAxis(lk_.result, inner.var, q * idxConst(vector) + idxConst(v)));
    Cse cse;
    vectorLoads(copies, guarded, cse);
    std::vector<FE> values;
    for (const loop::ExprP& c : copies) values.push_back(lower(c, guarded, cse));
    storeVector(values, outputIndexAt(inner.var, q * idxConst(vector)), guarded);
    k_.body.push_back(ifLess(linear, idxConst(points), std::move(guarded)));
    return;
  }
  unflatten(lk_.parallel, linear, points, guarded);
  makeAccumulators();
  for (size_t st = 0; st < lk_.stages.size(); ++st) {
    // Each thread runs every stage for its own output serially: one loop per reduction axis.
    const loop::Reduction& r = lk_.stages[st];
    guarded.push_back(assign(accs_[st], fconst(tensor::reduceInit(r.fn))));
    Block body;
    accumulate(st, body);
    for (size_t d = r.axes.size(); d-- > 0;) {
      const loop::Axis& a = r.axes[d];
      body = Block{forLoop(a.var + kFirstLoopVar, a.name, idxConst(0), idxConst(a.extent), 1, std::move(body))};
    }
    for (auto& st2 : body) guarded.push_back(std::move(st2));
  }
  storeResult(guarded);
  k_.body.push_back(ifLess(linear, idxConst(points), std::move(guarded)));
}

}  // namespace kiln::kernel::detail
