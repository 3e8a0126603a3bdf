// loop-fuse-attention: softmax(q·kᵀ ...)·v becomes one kernel (Kernel::attention, an OnlineSoftmax).
//
// After the other loop fusions, attention is three kernels however the model wrote it (sdpa, the Hugging Face eager
// path, a chain of matmul, softmax and matmul):
//   S  [rows.., j] = h(sum_d q(rows, d) * k(rows, j, d))                    scale or softcapping in h
//   P  [rows.., j] = exp(s(j) - max_j s) * (1 / sum_j exp(s(j) - max))      s(j) reads S[rows, j] (plus masks)
//   O  [rows.., e] = g(sum_r P[rows, r] * value(rows, r, e))
// They become one kernel writing O's buffer with O's axes and result g(acc0), whose OnlineSoftmax has key axis j,
// dot the sum of q·k (S's reduction), score s(j) with S's load replaced by h(dot) and value(rows, j, e). The scores
// are no longer stored, so they are no longer rounded to S's type: they stay f32 (as in PyTorch's flash kernels), and
// the fused kernel differs from the three by that rounding (and by P's, where P was stored in a 16-bit type). S and P are then unread (loop-eliminate-dead-buffers
// removes them): the scores and probabilities never go through memory.
//
// Fused only when a flash schedule can run the result (loop::flashAttentionOperands: q, k, v plain loads of one type,
// bf16/f16 for tensor cores or f32 for CUDA cores, contiguous, widths multiples of 16).
// The rule on the three kernels: S and P are temporaries read only by P and O respectively, P's rows are O's rows,
// S is read in s(j) only at [rows, j], P only as one factor of O's single sum. Terms of the value that do not read the
// key (GPT-NeoX's v bias) move to the result, added to acc0: the softmax weights sum to 1.
#include <fmt/format.h>

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "kiln/loop/attention.h"
#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

bool isApply(const ExprP& e, Fn fn) { return e->kind == Expr::Kind::Apply && e->fn == fn; }
bool isAcc(const ExprP& e, int stage) { return e->kind == Expr::Kind::Acc && e->stage == stage; }

// e with variables renamed (a map from variable id to replacement index).
ExprP renamed(const ExprP& e, const std::map<int, Idx>& to, const VarExtents& ext) {
  return mapIndices(e, [&](const Idx& i) {
    return simplify(substitute(i, [&](int v, const std::string&) -> Idx {
                      auto it = to.find(v);
                      return it == to.end() ? nullptr : it->second;
                    }), ext);
  });
}

// Index d of a load at the kernel's row d: the row variable itself, or 0 along an extent-1 axis (variables of extent 1
// counted as the 0 they are: a decoder step's one query row leaves sums such as `p2 + p1` in reshaped indices).
bool atRow(const Idx& index, const Axis& row, const VarExtents& ext) {
  const Idx at = simplify(substitute(index, [&](int v, const std::string&) -> Idx {
                            auto it = ext.find(v);
                            return it != ext.end() && it->second == 1 ? idxConst(0) : nullptr;
                          }), ext);
  if (sameIdx(at, idxVar(row.var, row.name))) return true;
  return row.extent == 1 && constValue(at) == 0;
}

// exp(x - acc0), returning x.
ExprP expMinusMax(const ExprP& e) {
  if (!isApply(e, Fn::Exp) || !isApply(e->args[0], Fn::Sub) || !isAcc(e->args[0]->args[1], 0)) return nullptr;
  return e->args[0]->args[0];
}

// P's result inside the guard of a safe softmax, where(acc0 == -inf, 0, r) (a row whose every score is -inf gets
// weights 0: PyTorch's attention), under casts; null when there is none.
ExprP insideEmptyRowGuard(const ExprP& result) {
  ExprP e = result;
  while (isApply(e, Fn::Cast)) e = e->args[0];
  if (!isApply(e, Fn::Where) || e->args[1]->kind != Expr::Kind::Imm || e->args[1]->imm != 0.f) return nullptr;
  const ExprP& cond = e->args[0];
  if (!isApply(cond, Fn::Eq) || !isAcc(cond->args[0], 0) || cond->args[1]->kind != Expr::Kind::Imm ||
      cond->args[1]->imm != -std::numeric_limits<float>::infinity())
    return nullptr;
  return e->args[2];
}

// The softmax's numerator argument x of P's result exp(x - acc0) * (1 / acc1) (or / acc1), under casts and the guard of
// a safe softmax.
ExprP softmaxScore(const ExprP& result) {
  ExprP e = result;
  if (ExprP inside = insideEmptyRowGuard(e)) e = inside;
  while (isApply(e, Fn::Cast)) e = e->args[0];
  if (isApply(e, Fn::Div) && isAcc(e->args[1], 1)) return expMinusMax(e->args[0]);
  if (!isApply(e, Fn::Mul)) return nullptr;
  for (int side = 0; side < 2; ++side) {
    const ExprP& r = e->args[1 - side];
    if (isApply(r, Fn::Div) && r->args[0]->kind == Expr::Kind::Imm && r->args[0]->imm == 1.f && isAcc(r->args[1], 1))
      return expMinusMax(e->args[side]);
  }
  return nullptr;
}

// e as a sum of terms: those that read the key variable are returned (summed), the others appended to `outside`; null
// when no term reads it.
ExprP splitKeyFreeTerms(const ExprP& e, int keyVar, std::vector<ExprP>& outside) {
  if (!usesVar(*e, keyVar)) {
    outside.push_back(e);
    return nullptr;
  }
  if (!isApply(e, Fn::Add)) return e;
  ExprP a = splitKeyFreeTerms(e->args[0], keyVar, outside), b = splitKeyFreeTerms(e->args[1], keyVar, outside);
  if (!a || !b) return a ? a : b;
  return apply(Fn::Add, {a, b});
}

// e with every acc0 replaced by f(acc0).
ExprP mapAcc(const ExprP& e, const std::function<ExprP(const ExprP&)>& f) {
  if (isAcc(e, 0)) return f(e);
  if (e->args.empty()) return e;
  auto copy = std::make_shared<Expr>(*e);
  for (auto& arg : copy->args) arg = mapAcc(arg, f);
  return copy;
}

// O's axes up to its width axis: all but a run of extent-1 axes at the end (a product's keepdim axis, Gemma-2's eager
// p·v writes [b, h, i, e, 1]).
size_t throughWidth(const Kernel& o) {
  size_t n = o.parallel.size();
  while (n > 1 && o.parallel[n - 1].extent == 1) --n;
  return n;
}

// The extents of `k`'s first n - 1 axes (its rows) are O's.
bool sameRows(const Kernel& k, const Kernel& o, size_t n) {
  for (size_t d = 0; d + 1 < n; ++d)
    if (k.parallel[d].extent != o.parallel[d].extent) return false;
  return true;
}

// P of the rule over O's n - 1 rows: a max stage and a sum stage, each over one key axis, and the keys its last axis.
bool isSoftmaxOverRows(const Kernel& pk, const Kernel& o, size_t n) {
  if (pk.attention || pk.stages.size() != 2 || pk.parallel.size() != n || pk.rowAxes + 1 != static_cast<int>(n)) return false;
  if (pk.stages[0].fn != ReduceFn::Max || pk.stages[1].fn != ReduceFn::Sum || pk.stages[0].axes.size() != 1 ||
      pk.stages[1].axes.size() != 1)
    return false;
  return sameRows(pk, o, n);
}

// S of the rule: a single sum of products over O's rows and the keys (then any extent-1 axes: a keepdim product's).
bool isScoreProduct(const Kernel& sk, const Kernel& o, size_t n, int64_t keys) {
  if (sk.attention || sk.stages.size() != 1 || sk.stages[0].fn != ReduceFn::Sum || sk.stages[0].axes.size() != 1 ||
      throughWidth(sk) != n || sk.parallel[n - 1].extent != keys || !isApply(sk.stages[0].value, Fn::Mul))
    return false;
  return sameRows(sk, o, n);
}

// The score s(j) of P with P's rows renamed to O's and its key axes to `key`, when the three forms of s agree (the max
// stage's value at j0, the sum stage's at j1, the result's at the last axis); null otherwise.
ExprP softmaxScoreAtKey(const Kernel& pk, const Kernel& o, size_t n, const Axis& key, const VarExtents& ext) {
  std::map<int, Idx> fromP;
  for (size_t d = 0; d + 1 < n; ++d) fromP[pk.parallel[d].var] = idxVar(o.parallel[d].var, o.parallel[d].name);
  auto at = [&](const ExprP& e, int var) {
    std::map<int, Idx> to = fromP;
    to[var] = idxVar(key.var, key.name);
    return renamed(e, to, ext);
  };
  ExprP s = at(pk.stages[0].value, pk.stages[0].axes[0].var);
  ExprP s1 = expMinusMax(pk.stages[1].value), s2 = softmaxScore(pk.result);
  if (!s1 || !s2 || exprKey(at(s1, pk.stages[1].axes[0].var)) != exprKey(s) ||
      exprKey(at(s2, pk.parallel.back().var)) != exprKey(s))
    return nullptr;
  return s;
}

bool isKeyVar(const Idx& i, const Axis& key) { return i->op == IndexNode::Op::Var && i->var == key.var; }

// s reads buffer S only at [rows, key] (then 0 along S's extent-1 axes after the keys).
bool readsScoresAtRows(const ExprP& s, int sBuffer, size_t n, const Axis& key, const Kernel& o, const VarExtents& ext) {
  bool ok = true;
  forEachLoad(s, [&](const Expr& l) {
    if (l.buffer != sBuffer) return;
    ok = ok && l.index.size() >= n && isKeyVar(l.index[n - 1], key);
    for (size_t d = 0; d + 1 < n && ok; ++d) ok = atRow(l.index[d], o.parallel[d], ext);
    for (size_t d = n; d < l.index.size() && ok; ++d) ok = constValue(l.index[d]) == 0;
  });
  return ok;
}

class Fuser {
 public:
  // Readers among the live kernels only: the kernels earlier fusions inlined are still there, unread, until
  // loop-eliminate-dead-buffers.
  explicit Fuser(const Program& p) : p_(p) {
    const std::vector<bool> live = liveKernels(p);
    readers_ = readersOfBuffers(p, &live);
  }

  // Why the last fuse() found the three kernels of an attention but did not fuse them; empty otherwise.
  const std::string& refusal() const { return refusal_; }

  // Kernel `oi` as the product O of the rule, fused with its S and P; nullopt when the rule does not hold.
  std::optional<Kernel> fuse(size_t oi) {
    refusal_.clear();
    const Kernel& o = p_.kernels[oi];
    const size_t n = throughWidth(o);
    if (o.attention || o.stages.size() != 1 || n < 2 || o.stages[0].fn != ReduceFn::Sum || o.stages[0].axes.size() != 1) return std::nullopt;
    const ExprP& product = o.stages[0].value;
    if (!isApply(product, Fn::Mul)) return std::nullopt;
    const Axis& r = o.stages[0].axes[0];
    for (int side = 0; side < 2; ++side) {
      const Expr* pLoad = plainLoad(product->args[side]);
      if (!pLoad) continue;
      int pk = producer(pLoad->buffer, static_cast<int>(oi));
      if (pk < 0) continue;
      bool rows = pLoad->index.size() == n && sameIdx(pLoad->index.back(), idxVar(r.var, r.name));
      for (size_t d = 0; d + 1 < n && rows; ++d) rows = atRow(pLoad->index[d], o.parallel[d], o.extents());
      if (!rows) continue;
      if (auto f = withSoftmax(oi, static_cast<size_t>(pk), product->args[1 - side])) return f;
    }
    return std::nullopt;
  }

 private:
  // The kernel writing temporary `buffer`, when `reader` is its only reader; -1 otherwise.
  int producer(int buffer, int reader) const {
    if (p_.buffers[static_cast<size_t>(buffer)].kind != Buffer::Kind::Temp) return -1;
    const std::vector<int>& rs = readers_[static_cast<size_t>(buffer)];
    if (rs.size() != 1 || rs[0] != reader) return -1;
    for (int k = reader; k-- > 0;)
      if (p_.kernels[static_cast<size_t>(k)].output == buffer) return k;
    return -1;
  }

  // S: the one temporary that s loads as a value and that a single-sum product over O's rows and the keys writes for P
  // alone; nullopt when none or several do. Other temporaries s reads stay loads of the fused kernel: a mask computed
  // once for every layer (a decoder step's, from its run-time positions), positions read as indices.
  std::optional<int> scoreBuffer(const ExprP& s, size_t pi, const Kernel& o, size_t n, int64_t keys) const {
    std::set<int> candidates;
    forEachBufferRead(s, [&](int b, bool asIndex) {
      if (asIndex || p_.buffers[static_cast<size_t>(b)].kind != Buffer::Kind::Temp) return;
      const int si = producer(b, static_cast<int>(pi));
      if (si >= 0 && isScoreProduct(p_.kernels[static_cast<size_t>(si)], o, n, keys)) candidates.insert(b);
    });
    if (candidates.size() != 1) return std::nullopt;
    return *candidates.begin();
  }

  std::optional<Kernel> withSoftmax(size_t oi, size_t pi, const ExprP& value) {
    const Kernel& o = p_.kernels[oi];
    const Kernel& pk = p_.kernels[pi];
    const size_t n = throughWidth(o);
    if (!isSoftmaxOverRows(pk, o, n)) return std::nullopt;
    const int64_t keys = pk.parallel.back().extent;
    // Variables of the fused kernel: O's, then the key and depth axes.
    int next = o.maxVar() + 1;
    Axis key{next++, "j", keys};
    VarExtents ext = o.extents();
    ext[key.var] = keys;
    ExprP s = softmaxScoreAtKey(pk, o, n, key, ext);
    if (!s) return std::nullopt;
    std::optional<int> sBuffer = scoreBuffer(s, pi, o, n, keys);
    if (!sBuffer) return std::nullopt;
    int si = producer(*sBuffer, static_cast<int>(pi));
    if (si < 0) return std::nullopt;
    const Kernel& sk = p_.kernels[static_cast<size_t>(si)];
    if (!isScoreProduct(sk, o, n, keys) || !readsScoresAtRows(s, *sBuffer, n, key, o, ext)) return std::nullopt;
    Axis depth{next++, "d", sk.stages[0].axes[0].extent};
    ext[depth.var] = depth.extent;
    std::map<int, Idx> fromS;
    for (size_t d = 0; d + 1 < n; ++d) fromS[sk.parallel[d].var] = idxVar(o.parallel[d].var, o.parallel[d].name);
    fromS[sk.parallel[n - 1].var] = idxVar(key.var, key.name);
    for (size_t d = n; d < sk.parallel.size(); ++d) fromS[sk.parallel[d].var] = idxConst(0);
    fromS[sk.stages[0].axes[0].var] = idxVar(depth.var, depth.name);
    const ExprP h = renamed(sk.result, fromS, ext);

    Kernel f;
    f.name = fmt::format("k{}_attention", oi);
    f.output = o.output;
    f.parallel = o.parallel;
    f.rowAxes = static_cast<int>(n) - 1;
    f.result = o.result;
    f.origins = mergeOrigins(mergeOrigins(sk.origins, pk.origins), o.origins);
    OnlineSoftmax a;
    a.key = key;
    a.dot = Reduction{ReduceFn::Sum, {depth}, renamed(sk.stages[0].value, fromS, ext)};
    a.score = mapLoads(s, [&](const Expr& l) { return l.buffer == *sBuffer ? h : std::make_shared<Expr>(l); });
    // Terms of the value that do not depend on the key (a bias added to v) leave the weighted sum: the weights sum to 1,
    // so sum_j w(j) (v(j) + c) / sum_j w(j) = sum_j w(j) v(j) / sum_j w(j) + c.
    ExprP weighted = renamed(value, {{o.stages[0].axes[0].var, idxVar(key.var, key.name)}}, ext);
    std::vector<ExprP> outside;
    weighted = splitKeyFreeTerms(weighted, key.var, outside);
    if (!weighted) return std::nullopt;
    a.value = weighted;
    for (const ExprP& c : outside)
      f.result = mapAcc(f.result, [&](const ExprP& acc) { return apply(Fn::Add, {acc, c}); });
    a.emptyRowsZero = insideEmptyRowGuard(pk.result) != nullptr;
    f.attention = std::move(a);
    if (!flashAttentionOperands(p_, f, &refusal_)) return std::nullopt;
    return f;
  }

  const Program& p_;
  std::vector<std::vector<int>> readers_;
  std::string refusal_;
};

}  // namespace

std::vector<std::string> attentionFusionRefusals(const Program& p) {
  Fuser fuser(p);
  std::vector<std::string> why(p.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i)
    if (!fuser.fuse(i)) why[i] = fuser.refusal();
  return why;
}

bool fuseAttention(Program& p) {
  bool changed = false;
  auto fuser = std::make_unique<Fuser>(p);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    if (auto f = fuser->fuse(i)) {
      p.kernels[i] = std::move(*f);
      changed = true;
      fuser = std::make_unique<Fuser>(p);  // the readers changed
    }
  }
  return changed;
}

}  // namespace kiln::loop
