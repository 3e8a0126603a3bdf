// loop-fuse-epilogues: a kernel with reductions absorbs the elementwise kernel that consumes its result
// pointwise (Triton/Inductor's epilogue fusion): `acc / n + eps` and `rsqrt` after a mean, a bias or a
// residual add after a matrix product.
//
// The rule: consumer C is merged into producer P when
//   - P has stages (reductions) and writes a temporary that C alone reads,
//   - C has no stages and reads P only pointwise: at its own output index, up to extent-1 axes (so the
//     squeeze after a keepdim reduction counts; where the two shapes differ only by trailing axes of one point,
//     each axis of P stays the axis it was, so that a one-token query axis of a p·v stays a variable for
//     loop-fuse-attention, and a decoder step's attention writes its bf16 result itself), and
//   - every other buffer C reads is ready when P runs (written by a kernel before P, or an input/weight).
// P's result becomes C's result with P's old result in place of the loads; P writes C's buffer.
// Pre: kernels in topological order. Post: same order, the merged consumers removed.
#include <algorithm>
#include <map>
#include <optional>

#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

// The extents of k's parallel axes without the trailing axes of one point.
std::vector<int64_t> shapeWithoutTrailingUnits(const Kernel& k) {
  std::vector<int64_t> shape;
  for (const Axis& a : k.parallel) shape.push_back(a.extent);
  while (!shape.empty() && shape.back() == 1) shape.pop_back();
  return shape;
}

// P's parallel variables in C's terms when C reads P pointwise: where their shapes differ only by trailing axes of one
// point, each of P's axes is C's axis of the same place (but the leading and trailing ones of one point: 0); otherwise
// P's extent-1 axes are 0 and its other axes are C's non-unit axes in order (a squeeze or unsqueeze between them is
// allowed). nullopt otherwise.
std::optional<std::map<int, Idx>> pointwiseMap(const Kernel& c, const Kernel& prod) {
  std::map<int, Idx> map;
  if (shapeWithoutTrailingUnits(c) == shapeWithoutTrailingUnits(prod)) {
    // The same axes but for trailing ones of one point (a keepdim axis dropped): an axis of one point between others
    // stays the axis it was, so a query axis of one token stays a variable (loop-fuse-attention looks for it); the
    // leading ones (a batch of one) and the trailing ones become 0, which leaves no index arithmetic for them.
    size_t lead = 0;
    while (lead < prod.parallel.size() && prod.parallel[lead].extent == 1) ++lead;
    for (size_t d = 0; d < prod.parallel.size(); ++d)
      map[prod.parallel[d].var] =
          d >= lead && d < c.parallel.size() && (prod.parallel[d].extent != 1 || d + 1 < c.parallel.size())
              ? idxVar(c.parallel[d].var, c.parallel[d].name)
              : idxConst(0);
  } else {
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
  }
  bool ok = true;
  forEachBufferRead(c.result, [&](int b, bool asIndex) { ok = ok && !(b == prod.output && asIndex); });
  // C's axes of one point are 0 wherever its indices use them (a view may leave `p2 + p1` for p1).
  std::map<int, Idx> unitZero;
  for (auto& a : c.parallel)
    if (a.extent == 1) unitZero[a.var] = idxConst(0);
  const VarExtents ext = c.extents();
  forEachLoad(c.result, [&](const Expr& l) {
    if (l.buffer != prod.output) return;
    for (size_t d = 0; d < l.index.size(); ++d) {
      bool unit = prod.parallel[d].extent == 1 && idxRange(l.index[d], ext) == std::pair<int64_t, int64_t>{0, 0};
      const Idx at = simplify(substitute(l.index[d], [&](int v, const std::string&) -> Idx {
                                auto it = unitZero.find(v);
                                return it == unitZero.end() ? nullptr : it->second;
                              }), ext);
      ok = ok && (unit || sameIdx(at, map[prod.parallel[d].var]));
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
