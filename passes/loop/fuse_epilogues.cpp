// loop-fuse-epilogues: a kernel with reductions absorbs the elementwise kernel that consumes its result
// pointwise (Triton/Inductor's epilogue fusion): `acc / n + eps` and `rsqrt` after a mean, a bias or a
// residual add after a matrix product.
//
// The rule: consumer C is merged into producer P when
//   - P has stages (reductions) and writes a temporary that C alone reads,
//   - C has no stages and reads P only pointwise: at its own output index, up to extent-1 axes (so the
//     squeeze after a keepdim reduction counts), and
//   - every other buffer C reads is ready when P runs (written by a kernel before P, or an input/weight).
// P's result becomes C's result with P's old result in place of the loads; P writes C's buffer.
// Pre: kernels in topological order. Post: same order, the merged consumers removed.
#include <algorithm>
#include <map>
#include <optional>

#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

// P's parallel variables in C's terms when C reads P pointwise: P's extent-1 axes are 0, its other axes
// are C's non-unit axes in order (a squeeze or unsqueeze between them is allowed). nullopt otherwise.
std::optional<std::map<int, Idx>> pointwiseMap(const Kernel& c, const Kernel& prod) {
  std::map<int, Idx> map;
  std::vector<const Axis*> cAxes;
  for (auto& a : c.parallel)
    if (a.extent != 1) cAxes.push_back(&a);
  size_t next = 0;
  for (auto& a : prod.parallel) {
    if (a.extent == 1) {
      map[a.var] = idxConst(0);
      continue;
    }
    if (next == cAxes.size() || cAxes[next]->extent != a.extent) return std::nullopt;
    map[a.var] = idxVar(cAxes[next]->var, cAxes[next]->name);
    ++next;
  }
  if (next != cAxes.size()) return std::nullopt;
  bool ok = true;
  forEachBufferRead(c.result, [&](int b, bool asIndex) { ok = ok && !(b == prod.output && asIndex); });
  forEachLoad(c.result, [&](const Expr& l) {
    if (l.buffer != prod.output) return;
    VarExtents ext = c.extents();
    for (size_t d = 0; d < l.index.size(); ++d) {
      bool unit = prod.parallel[d].extent == 1 && idxRange(l.index[d], ext) == std::pair<int64_t, int64_t>{0, 0};
      ok = ok && (unit || sameIdx(l.index[d], map[prod.parallel[d].var]));
    }
  });
  if (!ok) return std::nullopt;
  return map;
}

ExprP renamed(const ExprP& e, const std::map<int, Idx>& map) {
  return mapIndices(e, [&](const Idx& i) {
    return substitute(i, [&](int v, const std::string&) -> Idx {
      auto it = map.find(v);
      return it == map.end() ? nullptr : it->second;
    });
  });
}

}  // namespace

namespace {

// What one sweep of the pass knows: each buffer's writer and readers (kernel indices, stable during the sweep: a merged
// consumer is only marked, and erased at the end) and which kernels are merged away.
struct Sweep {
  std::map<int, int> writer;  // buffer -> kernel index
  std::vector<std::vector<int>> readers;
  std::vector<bool> merged;
};

// Merges the one consumer of kernel pi's result into it, if the rule allows; true when it did.
bool absorbEpilogue(Program& p, size_t pi, Sweep& s) {
  Kernel& prod = p.kernels[pi];
  if (prod.stages.empty() || p.buffers[prod.output].kind != Buffer::Kind::Temp) return false;
  const std::vector<int>& readers = s.readers[prod.output];
  if (readers.size() != 1) return false;
  const auto ci = static_cast<size_t>(readers[0]);
  Kernel& cons = p.kernels[ci];
  if (!cons.stages.empty()) return false;
  auto map = pointwiseMap(cons, prod);
  if (!map) return false;
  bool ready = true;
  forEachBufferRead(cons.result, [&](int b, bool) {
    auto it = s.writer.find(b);
    ready = ready && (b == prod.output || it == s.writer.end() || it->second < static_cast<int>(pi));
  });
  if (!ready) return false;
  // The merged kernel iterates the consumer's axes; the producer's stages are renamed into them, and
  // its reduction axes get variables the consumer's axes do not use.
  int nextVar = std::max(cons.maxVar(), prod.maxVar()) + 1;
  for (auto& st : prod.stages)
    for (Axis& a : st.axes) {
      (*map)[a.var] = idxVar(nextVar, a.name);
      a.var = nextVar++;
    }
  ExprP prodResult = renamed(prod.result, *map);
  for (auto& st : prod.stages) st.value = renamed(st.value, *map);
  prod.result = mapLoads(cons.result, [&](const Expr& l) -> ExprP {
    return l.buffer == prod.output ? prodResult : std::make_shared<Expr>(l);
  });
  prod.parallel = cons.parallel;
  prod.rowAxes = static_cast<int>(prod.parallel.size());
  prod.output = cons.output;
  prod.origins = mergeOrigins(prod.origins, cons.origins);
  s.writer[cons.output] = static_cast<int>(pi);
  s.merged[ci] = true;
  return true;
}

}  // namespace

// One sweep in kernel order, each producer absorbing consumers while it can (a chain of elementwise epilogues), is what
// restarting from the first kernel after every merge found: a merge only makes a buffer written earlier (by the
// producer) and changes no reader count of a later kernel's output. Linear in the kernels, where restarting was
// quadratic (issue 45).
bool fuseEpilogues(Program& p) {
  Sweep s{{}, readersOfBuffers(p), std::vector<bool>(p.kernels.size(), false)};
  for (size_t i = 0; i < p.kernels.size(); ++i) s.writer[p.kernels[i].output] = static_cast<int>(i);
  bool changed = false;
  for (size_t pi = 0; pi < p.kernels.size(); ++pi)
    while (!s.merged[pi] && absorbEpilogue(p, pi, s)) changed = true;
  if (!changed) return false;
  std::vector<Kernel> kept;
  for (size_t i = 0; i < p.kernels.size(); ++i)
    if (!s.merged[i]) kept.push_back(std::move(p.kernels[i]));
  p.kernels = std::move(kept);
  return true;
}

}  // namespace kiln::loop
