// loop-batch-expert-products: a product whose B matrix is picked per row by an index read from memory — a mixture of
// experts' expert product, out[m, n] = sum_k x[m, k] * W[group(m), n, k] with group(m) the row's expert id — becomes one
// product per matrix of W, out'[e, m, n] = sum_k x[m, k] * W[e, n, k], and every later read out[i, j] becomes
// out'[group(i), i, j]. The kernel records that only those points are read (Kernel::readOnlyAt), so its tiled schedule
// computes the tiles whose rows hold expert e and skips the others.
//
// Why: as one product per row, each row reads its expert's whole matrix on its own (a matrix-vector product per row on
// CUDA cores, no reuse between the rows that chose the same expert); 128 tokens of a Mixtral-shaped layer read 256
// expert matrices where 8 exist. As a product per expert the rows of a tile share each slice of B on tensor cores.
//
// When: the rows are sorted by group — group(m) provably nondecreasing in m (transformers' grouped_mm experts: the
// rows sorted by expert id, group(m) = the number of group offsets at or below m, clamped) — so that a tile of rows
// holds the consecutive experts group(first row) .. group(last row) and a block can tell from two reads whether it has
// work; with unsorted rows (the batched_mm form) every tile would hold every expert and the product would do E times
// the work, so those keep their schedule. At least kMinRows rows (a decoder step's one or two rows stay
// matrix-vector products, which read only the chosen experts). The product's output is not a model output.
#include <algorithm>
#include <optional>

#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

constexpr int64_t kMinRows = 16;
constexpr int kMaxProducerDepth = 4;

bool nondecreasingIdx(const Idx& e, int var, const Program& p, int depth);

bool usesVarIdx(const Idx& i, int var) {
  bool uses = false;
  forEachVar(i, [&](int v) { uses |= v == var; });
  return uses;
}

// Whether expression e of kernel k never decreases as variable `var` grows (the other variables held).
bool nondecreasingExpr(const ExprP& e, int var, const Kernel& k, const Program& p, int depth) {
  switch (e->kind) {
    case Expr::Kind::Imm: return true;
    case Expr::Kind::Acc: {  // a sum or maximum of terms each nondecreasing in var
      const Reduction& r = k.stages[static_cast<size_t>(e->stage)];
      return (r.fn == ReduceFn::Sum || r.fn == ReduceFn::Max) && nondecreasingExpr(r.value, var, k, p, depth);
    }
    case Expr::Kind::Load: {
      for (const Idx& i : e->index)
        if (usesVarIdx(i, var)) return false;
      return true;
    }
    case Expr::Kind::Select: {  // lhs < rhs ? a : b
      const Idx &lhs = e->index[0], &rhs = e->index[1];
      const ExprP &a = e->args[0], &b = e->args[1];
      if (!nondecreasingExpr(a, var, k, p, depth) || !nondecreasingExpr(b, var, k, p, depth)) return false;
      const bool l = usesVarIdx(lhs, var), r = usesVarIdx(rhs, var);
      if (!l && !r) return true;
      if (a->kind != Expr::Kind::Imm || b->kind != Expr::Kind::Imm) return false;
      // The condition turns from false to true as rhs grows (b to a), or from true to false as lhs grows (a to b).
      if (!l) return nondecreasingIdx(rhs, var, p, depth) && a->imm >= b->imm;
      if (!r) return nondecreasingIdx(lhs, var, p, depth) && b->imm >= a->imm;
      return false;
    }
    case Expr::Kind::Apply: {
      auto all = [&] {
        for (const ExprP& x : e->args)
          if (!nondecreasingExpr(x, var, k, p, depth)) return false;
        return true;
      };
      switch (e->fn) {
        case Fn::Add:
        case Fn::Min:
        case Fn::Max:
        case Fn::Cast: return all();
        case Fn::Mul:
          return all() && ((e->args[0]->kind == Expr::Kind::Imm && e->args[0]->imm >= 0) ||
                           (e->args[1]->kind == Expr::Kind::Imm && e->args[1]->imm >= 0));
        default: return false;
      }
    }
  }
  return false;
}

// Whether the 1-d buffer b holds values nondecreasing along its index: written by one kernel whose result never
// decreases along its one axis.
bool nondecreasingBuffer(int b, const Program& p, int depth) {
  if (depth >= kMaxProducerDepth || p.buffers[static_cast<size_t>(b)].shape.size() != 1) return false;
  const Kernel* writer = nullptr;
  for (const Kernel& k : p.kernels)
    if (k.output == b) {
      if (writer) return false;
      writer = &k;
    }
  if (!writer || writer->attention || writer->parallel.size() != 1) return false;
  return nondecreasingExpr(writer->result, writer->parallel[0].var, *writer, p, depth + 1);
}

bool nondecreasingIdx(const Idx& e, int var, const Program& p, int depth) {
  using Op = IndexNode::Op;
  switch (e->op) {
    case Op::Const:
    case Op::Var: return true;
    case Op::Add:
    case Op::Min:
    case Op::Max: return nondecreasingIdx(e->a, var, p, depth) && nondecreasingIdx(e->b, var, p, depth);
    case Op::Mul: {
      auto c = constValue(e->b) ? constValue(e->b) : constValue(e->a);
      const Idx& other = constValue(e->b) ? e->a : e->b;
      return c && *c >= 0 && nondecreasingIdx(other, var, p, depth);
    }
    case Op::FloorDiv:
    case Op::Shr:
    case Op::Shl: return nondecreasingIdx(e->a, var, p, depth);  // by positive constants
    case Op::Load: return nondecreasingIdx(e->a, var, p, depth) && nondecreasingBuffer(e->buffer, p, depth);
    case Op::Mod:
    case Op::Xor: return false;
  }
  return false;
}

// A load of B in a product kernel whose first index picks the matrix per row.
struct Gathered {
  int buffer = -1;   // W
  int rowAxis = -1;  // position in parallel of the one variable the first index reads
  Idx group;
};

// The gathered matrix of kernel k: every load of some buffer W (of three dimensions or more) has the same first index,
// which reads memory and exactly one variable, a parallel axis that W's other indices do not read.
std::optional<Gathered> gatheredMatrix(const Kernel& k, const Program& p) {
  if (k.attention || k.stages.empty() || k.rowAxes != static_cast<int>(k.parallel.size())) return std::nullopt;
  std::optional<Gathered> found;
  bool ok = true;
  forEachKernelExpr(k, [&](const ExprP& e) {
    forEachLoad(e, [&](const Expr& l) {
      if (!ok || p.buffers[static_cast<size_t>(l.buffer)].shape.size() < 3) return;
      bool readsMemory = false;
      forEachIndexLoad(l.index[0], [&](const IndexNode&) { readsMemory = true; });
      if (!readsMemory) return;
      std::vector<int> vars;
      forEachVar(l.index[0], [&](int v) {
        if (std::find(vars.begin(), vars.end(), v) == vars.end()) vars.push_back(v);
      });
      int axis = -1;
      for (size_t d = 0; d < k.parallel.size(); ++d)
        if (vars.size() == 1 && k.parallel[d].var == vars[0]) axis = static_cast<int>(d);
      for (size_t d = 1; d < l.index.size() && axis >= 0; ++d)
        if (usesVarIdx(l.index[d], vars[0])) axis = -1;
      if (axis < 0 || (found && (found->buffer != l.buffer || !sameIdx(found->group, l.index[0])))) {
        ok = false;
        return;
      }
      found = Gathered{l.buffer, axis, l.index[0]};
    });
  });
  if (!ok) return std::nullopt;
  return found;
}

// Whether buffer b is read as an index (an index value read from memory) anywhere, or is a model output.
bool readAsIndexOrOutput(const Program& p, int b) {
  if (std::find(p.outputs.begin(), p.outputs.end(), b) != p.outputs.end()) return true;
  bool asIndex = false;
  for (const Kernel& k : p.kernels)
    forEachKernelRead(k, [&](int buffer, bool index) { asIndex |= index && buffer == b; });
  return asIndex;
}

bool batchKernel(Program& p, size_t ki) {
  Kernel& k = p.kernels[ki];
  if (k.readOnlyAt) return false;
  auto g = gatheredMatrix(k, p);
  if (!g) return false;
  const Axis row = k.parallel[static_cast<size_t>(g->rowAxis)];
  const int64_t matrices = p.buffers[static_cast<size_t>(g->buffer)].shape[0];
  auto range = idxRange(g->group, {{row.var, row.extent}});
  if (row.extent < kMinRows || !range || range->first < 0 || range->second >= matrices) return false;
  if (!nondecreasingIdx(g->group, row.var, p, 0) || readAsIndexOrOutput(p, k.output)) return false;

  const Axis e{k.maxVar() + 1, "ex", matrices};
  const Idx eIdx = idxVar(e.var, e.name);
  mapKernelExprs(k, [&](const ExprP& x) {
    return mapLoads(x, [&](const Expr& l) {
      std::vector<Idx> index = l.index;
      if (l.buffer == g->buffer) index[0] = eIdx;
      return load(l.buffer, index);
    });
  });
  k.parallel.insert(k.parallel.begin(), e);
  k.rowAxes += 1;
  k.readOnlyAt = ReadOnlyAt{g->rowAxis + 1, g->group};
  Buffer& out = p.buffers[static_cast<size_t>(k.output)];
  out.shape.insert(out.shape.begin(), matrices);
  out.traced.clear();  // one product per matrix now, not the Torch value

  const int outId = k.output;
  const size_t rowDim = static_cast<size_t>(g->rowAxis);
  for (size_t j = 0; j < p.kernels.size(); ++j) {
    if (j == ki) continue;
    mapKernelExprs(p.kernels[j], [&](const ExprP& x) {
      return mapLoads(x, [&](const Expr& l) {
        if (l.buffer != outId) return load(l.buffer, l.index);
        std::vector<Idx> index = l.index;
        const Idx at = l.index[rowDim];
        index.insert(index.begin(), substitute(g->group, [&](int v, const std::string&) { return v == row.var ? at : nullptr; }));
        return load(l.buffer, index);
      });
    });
  }
  return true;
}

}  // namespace

bool batchExpertProducts(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.kernels.size(); ++i) changed |= batchKernel(p, i);
  return changed;
}

}  // namespace kiln::loop
