// kiln/loop/attention.h: the operands and key bounds of attention kernels.
#include "kiln/loop/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>

#include "kiln/support/error.h"

namespace kiln::loop {
namespace {

bool readsIndices(const Expr& load) {
  bool reads = false;
  for (auto& i : load.index) forEachIndexLoad(i, [&](const IndexNode&) { reads = true; });
  return reads;
}

// The load's flat element index is var + rest, rest free of var and a multiple of 8, and var's extent a multiple of 8:
// every aligned run of 8 values of var is 8 consecutive elements starting at a multiple of 8.
bool contiguousRuns(const Program& p, const Expr& load, int var, const VarExtents& ext) {
  const Shape& shape = p.buffers[static_cast<size_t>(load.buffer)].shape;
  Idx flat = idxConst(0);
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    flat = flat + load.index[d] * idxConst(stride);
    stride *= shape[d];
  }
  Idx rest = simplify(substitute(flat, [&](int v, const std::string&) -> Idx { return v == var ? idxConst(0) : nullptr; }), ext);
  auto diff = constValue(simplify(flat + idxMul(rest, -1) + idxMul(idxVar(var, "x"), -1), ext));
  return diff && *diff == 0 && provablyMultipleOf(rest, 8, ext) && ext.at(var) % 8 == 0;
}

bool isMasked(const ExprP& e) {
  return e->kind == Expr::Kind::Imm && e->imm <= kMaskedScore;
}

// c when index is the query variable plus the constant c.
std::optional<int64_t> queryOffset(const Idx& index, int queryVar, const VarExtents& ext) {
  return constValue(simplify(index + idxMul(idxVar(queryVar, "i"), -1), ext));
}

bool isKey(const Idx& index, int keyVar) {
  return index->op == IndexNode::Op::Var && index->var == keyVar;
}

}  // namespace

std::optional<AttentionOperands> flashAttentionOperands(const Program& p, const Kernel& k, std::string* why) {
  auto refuse = [&](std::string reason) -> std::optional<AttentionOperands> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (!k.attention || k.attention->dot.axes.size() != 1) return refuse("not an attention kernel with one depth axis");
  const OnlineSoftmax& a = *k.attention;
  const ExprP& dot = a.dot.value;
  if (dot->kind != Expr::Kind::Apply || dot->fn != Fn::Mul) return refuse("the scores' product is not q * k");
  const Expr *x = plainLoad(dot->args[0]), *y = plainLoad(dot->args[1]), *v = plainLoad(a.value);
  if (!x || !y) return refuse("q or k is computed in the product (the flash schedule copies plain loads)");
  if (!v) return refuse("v is computed in the product (the flash schedule copies plain loads)");
  const int keyVar = a.key.var, depthVar = a.dot.axes[0].var, widthVar = k.parallel[static_cast<size_t>(k.rowAxes)].var;
  AttentionOperands o;
  o.q = usesVar(*x, keyVar) ? y : x;
  o.k = o.q == x ? y : x;
  o.v = v;
  o.type = p.buffers[static_cast<size_t>(v->buffer)].dtype;
  o.depth = a.dot.axes[0].extent;
  o.width = k.parallel[static_cast<size_t>(k.rowAxes)].extent;
  for (const Expr* l : {o.q, o.k, o.v}) {
    if (p.buffers[static_cast<size_t>(l->buffer)].dtype != o.type) return refuse("q, k and v are not of one type");
    if (readsIndices(*l)) return refuse("q, k or v is gathered through indices read from memory");
  }
  if (o.type != DType::BF16 && o.type != DType::F16 && o.type != DType::F32)
    return refuse(fmt::format("q, k and v are {} (the flash schedules multiply bf16 or f16 on tensor cores, f32 on CUDA cores; "
                              "{} attention stays three kernels)", dtypeName(o.type), dtypeName(o.type)));
  if (usesVar(*o.q, keyVar) || !usesVar(*o.k, keyVar) || !usesVar(*o.v, keyVar) || usesVar(*o.v, depthVar))
    return refuse("q reads the key axis, or k or v does not, or v reads the depth axis");
  if (o.depth % 16 != 0 || o.depth > kAttentionMaxWidth || o.width % 16 != 0 || o.width > kAttentionMaxWidth)
    return refuse(fmt::format("head dims {} (q·k) and {} (v) must be multiples of 16 up to {}", o.depth, o.width, kAttentionMaxWidth));
  for (int d = k.rowAxes; d-- > 0 && o.queryAxis < 0;) {  // the innermost such axis (heads too, with one k/v head)
    const int var = k.parallel[static_cast<size_t>(d)].var;
    if (usesVar(*o.q, var) && !usesVar(*o.k, var) && !usesVar(*o.v, var)) o.queryAxis = d;
  }
  if (o.queryAxis < 0) return refuse("no query axis: no row axis that q reads and k and v do not (one query token)");
  const VarExtents ext = k.extents();
  if (!contiguousRuns(p, *o.q, depthVar, ext) || !contiguousRuns(p, *o.k, depthVar, ext) || !contiguousRuns(p, *o.v, widthVar, ext))
    return refuse("q and k along the head dim, or v along its width, are not contiguous in runs of 8 (16-byte copies)");
  return o;
}

bool sharedAcrossRows(const Program& p, const Kernel& k, int axis, int64_t rows) {
  const auto ops = flashAttentionOperands(p, k);
  const int64_t extent = k.parallel[static_cast<size_t>(axis)].extent;
  if (!ops || rows < 1 || extent % rows != 0) return false;
  const int var = k.parallel[static_cast<size_t>(axis)].var, block = k.maxVar() + 1, row = k.maxVar() + 2;
  VarExtents ext = k.extents();
  ext[block] = extent / rows;
  ext[row] = rows;
  const Idx at = idxVar(block, "b") * idxConst(rows) + idxVar(row, "r");
  for (const Expr* l : {ops->k, ops->v})
    for (const Idx& i : l->index) {
      const Idx spread = simplify(substitute(i, [&](int v, const std::string&) { return v == var ? at : nullptr; }), ext);
      bool varies = false;
      forEachVar(spread, [&](int v) { varies = varies || v == row; });
      if (varies) return false;
    }
  return true;
}

namespace {

// Walks the terms of the score's sum; a mask's select (a comparison of the key with the query plus a constant whose
// other side is masked) bounds the keys on its kept side, is reported to `bound` and replaced by that side.
ExprP walkMasks(const ExprP& e, int keyVar, int queryVar, const VarExtents& ext,
                const std::function<void(bool upper, int64_t c)>& bound) {
  if (e->kind == Expr::Kind::Apply && e->fn == Fn::Add) {
    auto copy = std::make_shared<Expr>(*e);
    for (auto& arg : copy->args) arg = walkMasks(arg, keyVar, queryVar, ext, bound);
    // A mask whose kept value is 0 leaves s + 0: s (exact up to the sign of a zero score, which exp(s - max) ignores).
    for (int i = 0; i < 2; ++i)
      if (copy->args[static_cast<size_t>(i)]->kind == Expr::Kind::Imm && copy->args[static_cast<size_t>(i)]->imm == 0.f)
        return copy->args[static_cast<size_t>(1 - i)];
    return copy;
  }
  if (e->kind != Expr::Kind::Select || !isKey(e->index[0], keyVar)) return e;
  auto c = queryOffset(e->index[1], queryVar, ext);
  if (!c) return e;
  if (isMasked(e->args[1])) {  // j < i + c keeps
    bound(true, *c);
    return walkMasks(e->args[0], keyVar, queryVar, ext, bound);
  }
  if (isMasked(e->args[0])) {  // j >= i + c keeps
    bound(false, *c);
    return walkMasks(e->args[1], keyVar, queryVar, ext, bound);
  }
  return e;
}

}  // namespace

KeyBounds keyBounds(const Kernel& k, int queryAxis) {
  KeyBounds b;
  if (!k.attention || queryAxis < 0) return b;
  const int queryVar = k.parallel[static_cast<size_t>(queryAxis)].var;
  walkMasks(k.attention->score, k.attention->key.var, queryVar, k.extents(), [&](bool upper, int64_t c) {
    if (upper) b.to = b.to ? std::min(*b.to, c) : c;
    else b.from = b.from ? std::max(*b.from, c) : c;
  });
  const int64_t queries = k.parallel[static_cast<size_t>(queryAxis)].extent, keys = k.attention->key.extent;
  for (int64_t i = 0; i < queries; ++i) {
    int64_t lo = std::max<int64_t>(0, i + b.from.value_or(std::numeric_limits<int32_t>::min()));
    int64_t hi = std::min<int64_t>(keys, i + b.to.value_or(std::numeric_limits<int32_t>::max()));
    if (lo >= hi) return KeyBounds{};
  }
  return b;
}

namespace {

// where(select(l < r, 1, 0), x, y) as the select(l < r, x, y) it is (a comparison loop-index-comparisons rewrote in
// its own kernel, inlined into the choice on it); e otherwise.
ExprP foldedChoice(const ExprP& e) {
  if (e->kind != Expr::Kind::Apply || e->fn != Fn::Where) return e;
  ExprP chosen = chooseOnIndices(e->args[0], e->args[1], e->args[2]);
  return chosen ? chosen : e;
}

// The run-time limits of the selects among e's summands (and inside their kept sides).
void runtimeLimits(const ExprP& choice, const Kernel& k, std::vector<Idx>& limits) {
  const ExprP e = foldedChoice(choice);
  if (e->kind == Expr::Kind::Apply && e->fn == Fn::Add) {
    for (const ExprP& a : e->args) runtimeLimits(a, k, limits);
    return;
  }
  if (e->kind != Expr::Kind::Select || !isKey(e->index[0], k.attention->key.var) || !isMasked(e->args[1])) return;
  const Idx& limit = e->index[1];
  bool readsMemory = false, overRows = true;
  forEachIndexLoad(limit, [&](const IndexNode&) { readsMemory = true; });
  forEachVar(limit, [&](int v) {
    bool row = false;
    for (int d = 0; d < k.rowAxes; ++d) row = row || k.parallel[static_cast<size_t>(d)].var == v;
    overRows = overRows && row;
  });
  if (readsMemory && overRows) limits.push_back(limit);
  runtimeLimits(e->args[0], k, limits);
}

}  // namespace

std::optional<Idx> runtimeKeyLimit(const Kernel& k) {
  if (!k.attention) return std::nullopt;
  std::vector<Idx> limits;
  runtimeLimits(k.attention->score, k, limits);
  if (limits.empty()) return std::nullopt;
  Idx limit = limits[0];
  for (size_t i = 1; i < limits.size(); ++i) limit = idxMin(limit, limits[i]);
  return limit;
}

ExprP unmaskedScore(const Kernel& k, int queryAxis) {
  KILN_ASSERT(k.attention && queryAxis >= 0, "kernel {}: unmaskedScore of a kernel that is not attention", k.name);
  return walkMasks(k.attention->score, k.attention->key.var, k.parallel[static_cast<size_t>(queryAxis)].var, k.extents(),
                   [](bool, int64_t) {});
}

}  // namespace kiln::loop
