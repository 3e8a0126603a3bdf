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

bool fuseEpilogues(Program& p) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    std::map<int, int> writer;  // buffer -> kernel index
    for (size_t i = 0; i < p.kernels.size(); ++i) writer[p.kernels[i].output] = static_cast<int>(i);
    auto readersOf = readersOfBuffers(p);
    for (size_t pi = 0; pi < p.kernels.size() && !again; ++pi) {
      Kernel& prod = p.kernels[pi];
      if (prod.stages.empty() || p.buffers[prod.output].kind != Buffer::Kind::Temp) continue;
      const std::vector<int>& readers = readersOf[prod.output];
      if (readers.size() != 1) continue;
      Kernel& cons = p.kernels[readers[0]];
      if (!cons.stages.empty()) continue;
      auto map = pointwiseMap(cons, prod);
      if (!map) continue;
      bool ready = true;
      forEachBufferRead(cons.result, [&](int b, bool) {
        auto it = writer.find(b);
        ready = ready && (b == prod.output || it == writer.end() || it->second < static_cast<int>(pi));
      });
      if (!ready) continue;
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
      p.kernels.erase(p.kernels.begin() + static_cast<long>(readers[0]));
      changed = again = true;
    }
  }
  return changed;
}

}  // namespace kiln::loop
