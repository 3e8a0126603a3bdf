// tile-fold-split-sums: a product that tile-shape-products split S ways (a partial product over K / S of the reduction
// per block into an f32 buffer [S][output], then a kernel adding the S partials and applying the epilogue) becomes one
// kernel again, its reduction split S ways inside it (TiledContraction::kSplit): each block stores its partial tile,
// and the last block of a tile to finish adds the tile's S partials, in the order of their pieces, and applies the
// epilogue. The sums are the adding kernel's, term for term.
//
//   before:  p[q, m, n] = sum_{k < K/S} a[m, q K/S + k] b[n, q K/S + k]        (partial, "NAME_split", S x T blocks)
//            out[m, n]  = epilogue(((p[0, m, n] + p[1, m, n]) + ...) + p[S - 1, m, n])      (adding kernel "NAME")
//   after:   out[m, n]  = epilogue(sum_{k < K} a[m, k] b[n, k])   with k_split=S: S x T blocks, one launch
//
// Why: the adding kernel is a launch of its own that waits for the whole partial grid and is waited for by the next
// kernel: about 2.5 to 3 us of fixed cost each (issue 43), three times a TinyLlama layer at 128 tokens (q/k/v, o_proj,
// down_proj). In the kernel, the last block of each tile does the adding while the other tiles' blocks still run.
// The price: the last block of a tile reads S partial tiles after its own k loop, serially behind it.
// Rule: the partial kernel (one stage, a wgmma product copied by tma or cp.async without a producer warp, clusters or
// stream-K: the paths kernel-lower-from-tile splits) directly followed by its adding kernel (a pointwise map whose every read of
// the partials is the whole sum at its own output place), the partials read by nothing else.
// Off by default until measured on the GPU (the rule: a fusion stays where it measured faster).
// The program's split products share one partials buffer and one counters buffer (they run one after another, and
// each leaves its counters zero).
#include <map>
#include <memory>
#include <optional>

#include "kiln/loop/ir.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {

// The leaves of e's tree of additions, left to right.
void additionLeaves(const loop::ExprP& e, std::vector<loop::ExprP>& leaves) {
  if (e->kind == loop::Expr::Kind::Apply && e->fn == loop::Fn::Add && e->args.size() == 2) {
    additionLeaves(e->args[0], leaves);
    additionLeaves(e->args[1], leaves);
    return;
  }
  leaves.push_back(e);
}

// Whether e is the adding kernel's sum ((p[0, x] + p[1, x]) + ...) + p[S - 1, x] at the output's own place x.
bool wholeSum(const loop::ExprP& e, int partials, int64_t split, const loop::Kernel& adding) {
  std::vector<loop::ExprP> leaves;
  additionLeaves(e, leaves);
  if (static_cast<int64_t>(leaves.size()) != split) return false;
  for (int64_t q = 0; q < split; ++q) {
    const loop::Expr& l = *leaves[static_cast<size_t>(q)];
    if (l.kind != loop::Expr::Kind::Load || l.buffer != partials || l.index.size() != adding.parallel.size() + 1 ||
        constValue(l.index[0]) != q)
      return false;
    for (size_t d = 0; d < adding.parallel.size(); ++d)
      if (!sameIdx(l.index[d + 1], idxVar(adding.parallel[d].var, adding.parallel[d].name))) return false;
  }
  return true;
}

// e with every whole sum of the partials as the accumulator; null if the partials are read any other way.
loop::ExprP sumsAsAccumulator(const loop::ExprP& e, int partials, int64_t split, const loop::Kernel& adding) {
  if (wholeSum(e, partials, split, adding)) return loop::accRef(0);
  if (e->kind == loop::Expr::Kind::Load) return e->buffer == partials ? nullptr : e;
  if (e->kind != loop::Expr::Kind::Apply && e->kind != loop::Expr::Kind::Select) return e;
  auto copy = std::make_shared<loop::Expr>(*e);
  for (loop::ExprP& a : copy->args) {
    a = sumsAsAccumulator(a, partials, split, adding);
    if (!a) return nullptr;
  }
  return copy;
}

// The product before tile-shape-products split it, from its partial kernel and its adding kernel; nullopt where they
// are not such a pair.
std::optional<loop::Kernel> joined(const loop::Program& p, const loop::Kernel& partial, const loop::Kernel& adding) {
  const std::vector<loop::Axis>& pa = partial.parallel;
  if (partial.name != adding.name + "_split" || !adding.stages.empty() || adding.attention ||
      pa.size() != adding.parallel.size() + 1 || partial.rowAxes < 1 || partial.stages.size() != 1)
    return std::nullopt;
  for (size_t d = 0; d < adding.parallel.size(); ++d)
    if (pa[d + 1].extent != adding.parallel[d].extent) return std::nullopt;
  const loop::Buffer& buf = p.buffers[static_cast<size_t>(partial.output)];
  if (buf.kind != loop::Buffer::Kind::Temp || buf.dtype != DType::F32) return std::nullopt;
  const int64_t split = pa[0].extent;
  loop::ExprP result = sumsAsAccumulator(adding.result, partial.output, split, adding);
  if (!result) return std::nullopt;
  // The partial reads k as q K/S + k over K/S: q at 0 and k over all of K is the original reduction (its variables
  // renamed to the adding kernel's, k to one that kernel does not use).
  const int q = pa[0].var;
  loop::Reduction stage = partial.stages[0];
  if (stage.axes.size() != 1) return std::nullopt;
  const int kFrom = stage.axes[0].var, kv = adding.maxVar() + 1;
  const int64_t part = stage.axes[0].extent;
  std::map<int, Idx> renamed{{q, idxConst(0)}, {kFrom, idxVar(kv, stage.axes[0].name)}};
  for (size_t d = 0; d < adding.parallel.size(); ++d)
    renamed[pa[d + 1].var] = idxVar(adding.parallel[d].var, adding.parallel[d].name);
  stage.axes[0].var = kv;
  stage.axes[0].extent *= split;
  VarExtents extents = adding.extents();
  extents[kv] = stage.axes[0].extent;
  bool unknown = false;  // a variable the partial kernel has and the rename misses
  stage.value = loop::mapIndices(stage.value, [&](const Idx& e) {
    return simplify(substitute(e, [&](int v, const std::string&) -> Idx {
                      auto it = renamed.find(v);
                      unknown = unknown || it == renamed.end();
                      return it == renamed.end() ? nullptr : it->second;
                    }), extents);
  });
  if (unknown) return std::nullopt;
  // q only in q K/S + k: the piece's k put back into the joined value (with the partial's variables) gives the
  // partial's value again.
  std::map<int, Idx> back{{kv, idxMul(idxVar(q, pa[0].name), part) + idxVar(kFrom, stage.axes[0].name)}};
  for (size_t d = 0; d < adding.parallel.size(); ++d) back[adding.parallel[d].var] = idxVar(pa[d + 1].var, pa[d + 1].name);
  const VarExtents pieceExtents = partial.extents();
  auto canonical = [&](const loop::ExprP& e) {
    return loop::exprKey(loop::mapIndices(e, [&](const Idx& x) { return simplify(x, pieceExtents); }));
  };
  const loop::ExprP again = loop::mapIndices(stage.value, [&](const Idx& e) {
    return substitute(e, [&](int v, const std::string&) -> Idx { return back.count(v) ? back.at(v) : nullptr; });
  });
  if (canonical(again) != canonical(partial.stages[0].value)) return std::nullopt;
  loop::Kernel k = adding;
  k.stages = {stage};
  k.rowAxes = partial.rowAxes - 1;
  k.result = result;
  return k;
}

}  // namespace

bool foldSplitSums(Program& p) {
  bool changed = false;
  for (size_t i = 0; i + 1 < p.loop.kernels.size(); ++i) {
    const auto* t = std::get_if<TiledContraction>(&p.schedules[i]);
    const loop::Kernel& partial = p.loop.kernels[i];
    if (!t || t->kSplit != 1 || t->streamK || !splitsInKernel(*t, partial) || !std::holds_alternative<PointwiseMap>(p.schedules[i + 1])) continue;
    const std::vector<std::vector<int>> readers = loop::readersOfBuffers(p.loop);
    if (readers[static_cast<size_t>(partial.output)] != std::vector<int>{static_cast<int>(i + 1)}) continue;
    std::optional<loop::Kernel> product = joined(p.loop, partial, p.loop.kernels[i + 1]);
    if (!product) continue;
    TiledContraction s = *t;
    s.mAxis -= 1;
    s.nAxis -= 1;
    s.kSplit = partial.parallel[0].extent;
    const Contraction c = contractionOf(s, *product);
    const int64_t tiles = c.outerPoints * tilesM(s, c) * tilesN(s, c);
    if (c.k % (s.kSplit * s.tileK) != 0) continue;
    s.partials = programBuffer(p, "split_k_partials", loop::Buffer::Kind::Temp, DType::F32, s.kSplit * tiles * s.tileM * s.tileN);
    s.counters = programBuffer(p, "split_k_counters", loop::Buffer::Kind::Counters, DType::I64, tiles);
    p.loop.kernels[i] = std::move(*product);
    p.schedules[i] = s;
    p.loop.kernels.erase(p.loop.kernels.begin() + static_cast<std::ptrdiff_t>(i + 1));
    p.schedules.erase(p.schedules.begin() + static_cast<std::ptrdiff_t>(i + 1));
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
