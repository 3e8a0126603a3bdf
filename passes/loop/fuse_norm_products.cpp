// loop-fuse-norm-products: a row normalisation (RMSNorm, LayerNorm: a kernel with stages over its row and an
// elementwise write along it) read only by matrix-vector products becomes the first stages of each product. Every
// output point of the product computes the row's statistics again from the row it reads anyway, then its own sum
// over the normalised row, which never goes through memory.
//
//   norm:     acc0 = sum_k x[m, k]^2;   t[m, k] = g[k] * bf16(x[m, k] * rsqrt(acc0 / K + eps))
//   product:  out[m, n] = sum_k t[m, k] * w[n, k]
//   becomes:  out[m, n] = sum_k (g[k] * bf16(x[m, k] * rsqrt(acc0 / K + eps))) * w[n, k],  acc0 = sum_k x[m, k]^2
//
// The values are those of the two kernels, rounding included: the normalised element is computed as the norm
// computed it, only where the product reads it.
//
// Why: a decoder step's norms are kernels of one block that the products after them wait for: a step of the
// dependent chain each, two per layer. The product's arithmetic grows by the norm's stages (at most twice its own
// reduction length per output) and it reads no new bytes from memory (the row, a few kilobytes, stays in the cache).
// Off by default: with a block of 256 threads per output the second block-wide reduction cost more than the norm
// kernel (docs/history.md); with tile-vectorize-reductions' warp per output it is to be measured again.
//
// The rule: producer P writes a temporary, has stages, and its parallel axes are its rows then one axis its result
// runs along (rowAxes = all but the last); it has at most kMaxProductRows rows (tokens: tile-tiled-contractions leaves
// products of fewer than 16 rows on their row-reduction schedule, which a kernel with stages keeps, so no product
// leaves the tensor cores); each reader C (at most kMaxFusionWorkGrowth) is a kernel whose stages are all per output
// point (rowAxes = all its parallel axes), reads P only inside its stages, each load at [C's first k axes (0 for an
// axis of one point), that stage's own reduction axis] with P's row extents, that reduction as long as P's last axis.
// Pre: loop-fuse-rows has made the norms (their stages), and loop-fuse-attention has taken the softmax rows attention
// needs (a softmax before its p·v has the form of the rule). Post: P is left without readers for
// loop-eliminate-dead-buffers.
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
      return isProduct(p.kernels[static_cast<size_t>(c)]) && readsNormalisedRows(p.kernels[static_cast<size_t>(c)], prod);
    });
    if (!all) continue;
    const Kernel copy = prod;
    for (int c : readers) {
      moveStagesInto(p.kernels[static_cast<size_t>(c)], copy, static_cast<int>(copy.parallel.size()) - 1);
      dedupeStages(p.kernels[static_cast<size_t>(c)]);
    }
    changed = true;
  }
  return changed;
}

}  // namespace kiln::loop
