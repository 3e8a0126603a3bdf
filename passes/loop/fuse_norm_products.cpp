// loop-fuse-norm-products: a row normalisation (RMSNorm, LayerNorm: a kernel with stages over its row and an
// elementwise write along it) read only by matrix-vector products becomes stages of each product. Every output point
// of the product computes the row's statistics again from the row it reads anyway, and where the normalisation is a
// scale of the row (RMSNorm) that scale is applied to the product's total instead of to each element, so the
// statistics and the product are independent sums over the same axis that one walk of the row can take together:
//
//   norm:     acc0 = sum_k x[m, k]^2;   t[m, k] = g[k] * bf16(x[m, k] * rsqrt(acc0 / K + eps))
//   product:  out[m, n] = sum_k t[m, k] * w[n, k]
//   becomes:  out[m, n] = acc1 * rsqrt(acc0 / K + eps),   acc0 = sum_k x[m, k]^2,   acc1 = sum_k g[k] * bf16(x[m, k]) * w[n, k]
//
// Taking the scale out of the sum drops the rounding of the normalised element to the model's type (bf16 there):
// the product sums the unrounded normalised row, which is closer to the f32 evaluation DESIGN.md's bf16 rule compares
// with (f32 models have no such cast; only the order of their multiplications changes). A normalisation that is not
// a scale of the row (LayerNorm's x - mean) is moved as it is: its stages before the product's, which then waits for
// them.
//
// Why: a decoder step's norms are kernels of one block that the products after them wait for: a step of the
// dependent chain each, two per layer. The product's arithmetic grows by the norm's stages (one sum of squares per
// output, taken in the same walk as its own) and it reads no new bytes from memory (the row and the norm's weight, a
// few kilobytes, stay in the cache). The first form of this pass kept the scale inside the sum: each output then
// summed the row's squares before starting its product, which cost more than the norm's kernel (docs/history.md).
//
// The rule: producer P writes a temporary, has stages, and its parallel axes are its rows then one axis its result
// runs along (rowAxes = all but the last); it has at most kMaxProductRows rows (tokens: tile-tiled-contractions leaves
// products of fewer than 16 rows on their row-reduction schedule, which a kernel with stages keeps, so no product
// leaves the tensor cores); each reader C (at most kMaxFusionWorkGrowth) is a kernel whose stages are all per output
// point (rowAxes = all its parallel axes), reads P only inside its stages, each load at [C's first k axes (0 for an
// axis of one point), that stage's own reduction axis] with P's row extents, that reduction as long as P's last axis,
// and P loads no element wider than the narrowest C loads (else C's reduction vectors would narrow).
// Then in C, a sum whose summand is a product (through casts between float types) of factors some of which read the
// totals of earlier stages and none of the sum's own axes, and whose other factors read no total, becomes the sum of
// those other factors, and its total is multiplied by the taken factors wherever it is read.
// Pre: loop-fuse-rows has made the norms (their stages), and loop-fuse-attention has taken the softmax rows attention
// needs (a softmax before its p·v has the form of the rule). Post: P is left without readers for
// loop-eliminate-dead-buffers.
#include <algorithm>
#include <map>

#include "kiln/loop/ir.h"
#include "row_stages.h"

namespace kiln::loop {
namespace {

constexpr int64_t kMaxProductRows = 15;

// Whether every load of P in C has the form of the rule.
bool readsNormalisedRows(const Kernel& c, const Kernel& prod) {
  const int k = static_cast<int>(prod.parallel.size()) - 1;
  if (static_cast<int>(c.parallel.size()) < k) return false;
  for (int d = 0; d < k; ++d)
    if (c.parallel[d].extent != prod.parallel[d].extent) return false;
  bool ok = true, any = false;
  for (const Reduction& s : c.stages)
    forEachLoad(s.value, [&](const Expr& l) {
      if (l.buffer != prod.output) return;
      any = true;
      for (int d = 0; d < k; ++d)  // an axis of one point may be indexed 0 (the indices are simplified)
        ok = ok && (sameIdx(l.index[d], idxVar(c.parallel[d].var, c.parallel[d].name)) ||
                    (c.parallel[d].extent == 1 && constValue(l.index[d]) == 0));
      const Idx& along = l.index[static_cast<size_t>(k)];
      ok = ok && s.axes.size() == 1 && s.axes[0].extent == prod.parallel.back().extent &&
           sameIdx(along, idxVar(s.axes[0].var, s.axes[0].name));
    });
  forEachKernelExpr(c, [&](const ExprP& e) {
    forEachBufferRead(e, [&](int b, bool asIndex) { ok = ok && !(b == prod.output && asIndex); });
  });
  bool inResult = false;
  forEachLoad(c.result, [&](const Expr& l) { inResult = inResult || l.buffer == prod.output; });
  return ok && any && !inResult;
}

bool isFloat(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Splits the summand e of stage s into `scales`, its factors that are the same at every step of the sum (they read
// earlier stages' totals and none of s's axes), and the rest it returns (null when nothing is left): e = rest * scales
// up to the roundings of the casts between float types the split passes through, which stay on the rest (a cast of a
// value loaded from a buffer of the cast's type changes nothing and goes).
ExprP splitScales(const ExprP& e, const Reduction& s, const std::vector<Buffer>& buffers, std::vector<ExprP>& scales) {
  const bool alongAxes = std::any_of(s.axes.begin(), s.axes.end(), [&](const Axis& a) { return usesVar(*e, a.var); });
  if (!alongAxes && readsTotal(e)) {
    scales.push_back(e);
    return nullptr;
  }
  if (e->kind != Expr::Kind::Apply) return e;
  if (e->fn == Fn::Mul) {
    std::vector<ExprP> rest;
    for (const ExprP& a : e->args)
      if (ExprP r = splitScales(a, s, buffers, scales)) rest.push_back(r);
    if (rest.empty()) return nullptr;
    return rest.size() == 1 ? rest[0] : apply(Fn::Mul, rest);
  }
  if (e->fn == Fn::Cast && isFloat(e->castTo) && e->args.size() == 1) {
    ExprP inner = splitScales(e->args[0], s, buffers, scales);
    if (!inner) return nullptr;
    const Expr* loaded = plainLoad(inner);
    if (loaded && buffers[static_cast<size_t>(loaded->buffer)].dtype == e->castTo) return inner;
    auto cast = std::make_shared<Expr>(*e);
    cast->args = {inner};
    return cast;
  }
  return e;
}

// The rule's last step on kernel c: each sum whose scales can be taken out of it becomes independent of the stages
// before it.
void takeScalesOutOfSums(Kernel& c, const std::vector<Buffer>& buffers) {
  for (size_t i = 0; i < c.stages.size(); ++i) {
    Reduction& s = c.stages[i];
    if (s.fn != ReduceFn::Sum) continue;
    std::vector<ExprP> scales;
    ExprP rest = splitScales(s.value, s, buffers, scales);
    if (scales.empty() || !rest || readsTotal(rest)) continue;
    s.value = rest;
    ExprP total = accRef(static_cast<int>(i));
    for (const ExprP& f : scales) total = apply(Fn::Mul, {total, f});
    auto scaled = [&](int stage) { return stage == static_cast<int>(i) ? total : accRef(stage); };
    for (size_t j = i + 1; j < c.stages.size(); ++j) c.stages[j].value = mapAccs(c.stages[j].value, scaled);
    c.result = mapAccs(c.result, scaled);
  }
}

// Axes of one point index as 0 in c's expressions, so that the norm's loads of the row (indexed 0 there) and the
// product's (indexed by c's axes) are one load where one walk takes both.
void pinUnitAxes(Kernel& c) {
  std::map<int, Idx> zero;
  for (const Axis& a : c.parallel)
    if (a.extent == 1) zero[a.var] = idxConst(0);
  mapKernelExprs(c, [&](const ExprP& e) {
    return mapIndices(e, [&](const Idx& i) {
      return substitute(i, [&](int v, const std::string&) -> Idx {
        auto it = zero.find(v);
        return it == zero.end() ? nullptr : it->second;
      });
    });
  });
}

// The widest element kernel k loads, in bytes (skipping buffer `except`); the narrowest with `narrowest`.
int elementBytes(const Program& p, const Kernel& k, bool narrowest, int except = -1) {
  int bytes = narrowest ? 8 : 0;
  forEachKernelExpr(k, [&](const ExprP& e) {
    forEachLoad(e, [&](const Expr& l) {
      if (l.buffer == except) return;
      const int b = dtypeBytes(p.buffers[static_cast<size_t>(l.buffer)].dtype);
      bytes = narrowest ? std::min(bytes, b) : std::max(bytes, b);
    });
  });
  return bytes;
}

bool isNorm(const Program& p, const Kernel& k) {
  return !k.stages.empty() && !k.attention && p.buffers[static_cast<size_t>(k.output)].kind == Buffer::Kind::Temp &&
         k.parallel.size() >= 2 && k.rowAxes == static_cast<int>(k.parallel.size()) - 1 && k.rowPoints() <= kMaxProductRows;
}

bool isProduct(const Kernel& c) {
  return !c.stages.empty() && !c.attention && c.rowAxes == static_cast<int>(c.parallel.size());
}

}  // namespace

bool fuseNormProducts(Program& p) {
  bool changed = false;
  const std::vector<bool> live = liveKernels(p);  // fusion before this pass leaves kernels no output needs
  const std::vector<std::vector<int>> readersOf = readersOfBuffers(p, &live);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& prod = p.kernels[i];
    if (!live[i]) continue;
    if (!isNorm(p, prod)) continue;
    const std::vector<int>& readers = readersOf[static_cast<size_t>(prod.output)];
    if (readers.empty() || static_cast<int64_t>(readers.size()) > kMaxFusionWorkGrowth) continue;
    const bool all = std::all_of(readers.begin(), readers.end(), [&](int c) {
      const Kernel& reader = p.kernels[static_cast<size_t>(c)];
      // A norm loading wider elements than the product (the last norm of a bf16 Llama reads the f32 residual) would
      // narrow the product's 16-byte vectors of weights (tile-vectorize-reductions: one vector for every load).
      return isProduct(reader) && readsNormalisedRows(reader, prod) &&
             elementBytes(p, prod, false) <= elementBytes(p, reader, true, prod.output);
    });
    if (!all) continue;
    const Kernel copy = prod;
    for (int c : readers) {
      moveStagesInto(p.kernels[static_cast<size_t>(c)], copy, static_cast<int>(copy.parallel.size()) - 1);
      dedupeStages(p.kernels[static_cast<size_t>(c)]);
      takeScalesOutOfSums(p.kernels[static_cast<size_t>(c)], p.buffers);
      pinUnitAxes(p.kernels[static_cast<size_t>(c)]);
    }
    changed = true;
  }
  return changed;
}

}  // namespace kiln::loop
