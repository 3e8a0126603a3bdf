// kernel-lower-from-tile for PointwiseMap schedules (kernel_builder.h).
//   vector 1, one vector per thread: i = blockIdx.x*threads + threadIdx.x; if (i < points) { the parallel indices
//     of point i; each reduction as a serial loop; store }.
//   otherwise (no reductions): thread t of block b takes vectors i_u = (b*U + u)*threads + t, u < U
//     (U = vectorsPerThread), each `vector` consecutive points of the innermost axis. First every vector's loads
//     (vector loads where its points are consecutive and aligned), then every vector's values and its vector store;
//     each part under i_u < points/vector where the grid overshoots.
#include <fmt/format.h>

#include <set>

#include "bodies.h"
#include "kernel_builder.h"

namespace kiln::kernel::detail {
namespace {

// The definitions of `defs` that `work` reads, directly or through another kept definition (nvcc refuses a variable
// defined and never read: an axis of extent 1, or an index only the other part of the vector uses).
Block definitionsRead(const Block& defs, const Block& work) {
  std::set<int> read;
  varsRead(work, read);
  std::vector<bool> keep(defs.size(), false);
  for (size_t i = defs.size(); i-- > 0;) {
    const auto* def = std::get_if<op::DefIdx>(&defs[i].op);
    keep[i] = !def || read.count(def->var) > 0;
    if (keep[i]) varsRead(Block{defs[i]}, read);
  }
  Block kept;
  for (size_t i = 0; i < defs.size(); ++i)
    if (keep[i]) kept.push_back(defs[i]);
  return kept;
}

}  // namespace

void KernelBuilder::pointwise(const tile::PointwiseMap& m) {
  const int64_t vector = m.vector, perThread = m.vectorsPerThread, points = lk_.parallelPoints() / vector, block = m.threads;
  k_.block = {block, 1, 1};
  k_.grid = {tile::gridBlocks(s_, lk_), 1, 1};
  extents_[kThreadIdx] = block;
  extents_[kBlockIdx] = k_.grid[0];
  if (vector > 1 || perThread > 1) {
    const bool guarded = k_.grid[0] * block * perThread != points;
    struct Part {
      Idx linear;
      Block defs;                       // its parallel indices, defined where they are used (under the guard)
      std::vector<loop::ExprP> copies;  // the result at each point of the vector
      Idx output;                       // the output's flat index of the vector's first point
    };
    std::vector<Part> parts;
    for (int64_t u = 0; u < perThread; ++u) {
      Part part;
      part.linear = defVar(k_.body, fmt::format("i{}", u), (blockIdx() * idxConst(perThread) + idxConst(u)) * idxConst(block) + threadIdx(), points);
      // Vector u's own variables: each parallel axis renamed (the innermost walked by its vector index q).
      std::vector<loop::Axis> axes;
      loop::ExprP result = storedResult();
      for (size_t d = 0; d < lk_.parallel.size(); ++d) {
        const loop::Axis& a = lk_.parallel[d];
        const bool inner = d + 1 == lk_.parallel.size();
        axes.push_back(loop::Axis{freshLoopVar(), fmt::format("{}{}", inner ? "q" : a.name, perThread > 1 ? fmt::format("_{}", u) : ""),
                                  inner ? a.extent / vector : a.extent});
        if (!inner) result = atAxis(result, a.var, idxVar(axes.back().var, axes.back().name));
      }
      unflatten(axes, part.linear, points, part.defs);
      const loop::Axis& p = lk_.parallel.back();
      const Idx q = idxVar(axes.back().var, axes.back().name) * idxConst(vector);
      for (int64_t v = 0; v < vector; ++v) part.copies.push_back(atAxis(result, p.var, q + idxConst(v)));
      std::vector<Idx> index;
      for (size_t d = 0; d + 1 < axes.size(); ++d) index.push_back(shifted(idxVar(axes[d].var, axes[d].name)));
      index.push_back(shifted(q));
      part.output = rowMajor(index, tp_.loop.buffers[lk_.output].shape, extents_);
      parts.push_back(std::move(part));
    }
    std::vector<bool> defined(parts.size(), false);  // unguarded, each part's indices are defined once, at kernel scope
    auto inRange = [&](const Part& part, Block work) {
      const size_t at = static_cast<size_t>(&part - parts.data());
      Block body = guarded ? definitionsRead(part.defs, work) : !defined[at] ? part.defs : Block{};
      defined[at] = true;
      for (Stmt& s : work) body.push_back(std::move(s));
      if (!guarded) {
        for (Stmt& s : body) k_.body.push_back(std::move(s));
        return;
      }
      k_.body.push_back(ifLess(part.linear, idxConst(points), std::move(body)));
    };
    Cse cse;
    for (const Part& part : parts) {
      Block loads;
      vectorLoads(part.copies, loads, cse);
      // No loads to put first (the points gather from computed indices, as a cat of run-time rotary angles does): a
      // guarded part would be its index definitions alone, unused (nvcc refuses them); its values' part defines them.
      if (loads.empty() && guarded) continue;
      inRange(part, std::move(loads));
    }
    for (const Part& part : parts) {
      Block body;
      std::vector<FE> values;
      for (const loop::ExprP& c : part.copies) values.push_back(lower(c, body, cse));
      storeVector(values, part.output, body);
      inRange(part, std::move(body));
    }
    return;
  }
  Idx linear = idxVar(kLinearVar, "i");
  k_.body.push_back(defIdx(kLinearVar, "i", blockIdx() * idxConst(block) + threadIdx()));
  extents_[kLinearVar] = points;
  Block guarded;
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
