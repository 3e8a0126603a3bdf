// loop-index-comparisons: a choice between two values on a comparison of integers that are indices becomes a select on
// index expressions: where(a <= b, x, y) -> select(a < b + 1, x, y) (likewise <, >, >=; a == b is two selects,
// select(a < b, y, select(a < b + 1, x, y)), and != the same with x and y exchanged), when a and b are each
//   - an integer weight that holds its own index along one dimension plus a constant (an arange, broadcast or not),
//     read at some index: that dimension's index plus the constant;
//   - an element of an integer (i64) input or temporary: an index read from memory (idxLoad), as a gather reads ids;
//     a temporary computed element by element is followed to what it computes where that is such a value (a view to the
//     element it shows, `position + 0` to the position: its kernel then has no reader left);
//   - an integral immediate, or a sum or difference of such values.
// A decoder step's causal mask is such a comparison: `kv_idx <= q_idx` with kv_idx an arange over the cache and q_idx
// the positions the forward was given. As a select on the key's index it is a bound later passes can read
// (loop::runtimeKeyLimit: the keys past a row's run-time bound need not be loaded at all), and the loads of the arange
// are gone. Exact: the comparison is of the same integers (as floats they were exact only below 2^24).
// A comparison whose value is kept (a bool stored: transformers computes a decoder step's mask once for every layer)
// becomes select(a < b + 1, 1, 0) (for == and !=, the two selects choosing 1 or 0): computed from indices alone, which loop-fuse-producers inlines into every reader
// whatever the work it repeats, so that the choice on it lands in each attention's score (loop::runtimeKeyLimit reads
// `where(select(j < L, 1, 0), 0, -inf)` as well). Runs before the fusions.
#include <map>
#include <optional>

#include "kiln/loop/ir.h"

namespace kiln::loop {
namespace {

bool isApply(const ExprP& e, Fn fn) { return e->kind == Expr::Kind::Apply && e->fn == fn; }

// An integer weight whose every element is its index along dimension `dim` plus `offset`.
struct Iota {
  size_t dim = 0;
  int64_t offset = 0;
};

std::optional<Iota> iotaOf(const Buffer& b) {
  if (b.kind != Buffer::Kind::Weight || b.dtype != DType::I64 || !b.weight || b.shape.empty()) return std::nullopt;
  const std::vector<float>& w = b.weight->values;
  if (static_cast<int64_t>(w.size()) != numel(b.shape) || w.empty()) return std::nullopt;
  for (size_t dim = b.shape.size(); dim-- > 0;) {
    int64_t inner = 1;
    for (size_t d = dim + 1; d < b.shape.size(); ++d) inner *= b.shape[d];
    const int64_t offset = static_cast<int64_t>(w[0]);
    bool holds = true;
    for (size_t i = 0; i < w.size() && holds; ++i)
      holds = w[i] == static_cast<float>(static_cast<int64_t>(i) / inner % b.shape[dim] + offset);
    if (holds) return Iota{dim, offset};
  }
  return std::nullopt;
}

class Rewriter {
 public:
  explicit Rewriter(const Program& p) : p_(p) {
    for (const Kernel& k : p.kernels)  // kernels computing each element alone: a view, or arithmetic on positions
      if (k.stages.empty() && !k.attention) producers_[k.output] = &k;
  }

  ExprP rewrite(const ExprP& e, const VarExtents& ext) {
    if (e->kind != Expr::Kind::Apply && e->kind != Expr::Kind::Select) return e;
    std::vector<ExprP> args;
    bool argsChanged = false;
    for (const ExprP& a : e->args) {
      args.push_back(rewrite(a, ext));
      argsChanged = argsChanged || args.back() != a;
    }
    if (isApply(e, Fn::Where))
      if (ExprP s = asSelect(args, ext)) return s;
    if (e->kind == Expr::Kind::Apply && !isApply(e, Fn::Where))  // a comparison whose value is kept: 1 or 0
      if (ExprP s = asSelect({e, imm(1.f), imm(0.f)}, ext)) return s;
    if (!argsChanged) return e;
    auto copy = std::make_shared<Expr>(*e);
    copy->args = std::move(args);
    return copy;
  }

  bool changed() const { return changed_; }

 private:
  // where(cond, x, y) as a select on cond's integers; null when cond is not such a comparison.
  ExprP asSelect(std::vector<ExprP> args, const VarExtents& ext) {
    const ExprP& cond = args[0];
    if (cond->kind == Expr::Kind::Select)  // a comparison rewritten already (below): where(select(l < r, 1, 0), x, y)
      if (ExprP chosen = chooseOnIndices(cond, args[1], args[2])) {
        changed_ = true;
        return chosen;
      }
    if (cond->kind != Expr::Kind::Apply || cond->args.size() != 2) return nullptr;
    const Fn fn = cond->fn;
    if (fn != Fn::Lt && fn != Fn::Le && fn != Fn::Gt && fn != Fn::Ge && fn != Fn::Eq && fn != Fn::Ne) return nullptr;
    std::optional<Idx> a = indexValue(cond->args[0], ext), b = indexValue(cond->args[1], ext);
    if (!a || !b) return nullptr;
    changed_ = true;
    // Keeps x when lhs < rhs: a < b; a <= b is a < b + 1; a > b is b < a; a >= b is b < a + 1.
    if (fn == Fn::Lt) return select(*a, *b, args[1], args[2]);
    if (fn == Fn::Le) return select(*a, simplify(idxAdd(*b, 1), ext), args[1], args[2]);
    if (fn == Fn::Gt) return select(*b, *a, args[1], args[2]);
    if (fn == Fn::Ge) return select(*b, simplify(idxAdd(*a, 1), ext), args[1], args[2]);
    // a == b: a < b fails and a < b + 1 holds.
    const ExprP& equal = fn == Fn::Eq ? args[1] : args[2];
    const ExprP& unequal = fn == Fn::Eq ? args[2] : args[1];
    return select(*a, *b, unequal, select(*a, simplify(idxAdd(*b, 1), ext), equal, unequal));
  }

  std::optional<Idx> indexValue(const ExprP& e, const VarExtents& ext) {
    if (e->kind == Expr::Kind::Imm) {
      const auto v = static_cast<int64_t>(e->imm);
      if (static_cast<float>(v) != e->imm) return std::nullopt;
      return idxConst(v);
    }
    if (e->kind == Expr::Kind::Load) return loadedIndex(*e, ext);
    if (!isApply(e, Fn::Add) && !isApply(e, Fn::Sub)) return std::nullopt;
    std::optional<Idx> a = indexValue(e->args[0], ext), b = indexValue(e->args[1], ext);
    if (!a || !b) return std::nullopt;
    return simplify(e->fn == Fn::Add ? *a + *b : *a + idxMul(*b, -1), ext);
  }

  std::optional<Idx> loadedIndex(const Expr& load, const VarExtents& ext) {
    const Buffer& b = p_.buffers[static_cast<size_t>(load.buffer)];
    if (b.dtype != DType::I64) return std::nullopt;
    if (b.kind == Buffer::Kind::Weight) {
      const std::optional<Iota>& iota = iotaOfBuffer(load.buffer);
      if (!iota) return std::nullopt;
      return simplify(idxAdd(load.index[iota->dim], iota->offset), ext);
    }
    if (b.kind != Buffer::Kind::Input && b.kind != Buffer::Kind::Temp) return std::nullopt;
    // A temporary computed element by element: a view (a broadcast of the positions over the keys) is the element it
    // shows; arithmetic on indices (a decoder step's `position + 0`, its cache write index) is that arithmetic, and its
    // kernel is left to loop-eliminate-dead-buffers. Before the fusions such kernels still stand between the comparison
    // and the buffer it reads, and an index read is not inlined later. Anything else is read from the temporary.
    if (auto producer = producers_.find(load.buffer); producer != producers_.end()) {
      std::optional<Idx> value = indexValue(inlineProducer(std::make_shared<Expr>(load), *producer->second, ext), ext);
      if (value || producer->second->result->kind == Expr::Kind::Load) return value;
    }
    Idx flat = idxConst(0);
    int64_t stride = 1;
    for (size_t d = b.shape.size(); d-- > 0;) {
      flat = flat + idxMul(load.index[d], stride);
      stride *= b.shape[d];
    }
    return idxLoad(load.buffer, b.name, simplify(flat, ext));
  }

  const std::optional<Iota>& iotaOfBuffer(int buffer) {
    auto it = iotas_.find(buffer);
    if (it == iotas_.end()) it = iotas_.emplace(buffer, iotaOf(p_.buffers[static_cast<size_t>(buffer)])).first;
    return it->second;
  }

  const Program& p_;
  std::map<int, const Kernel*> producers_;
  std::map<int, std::optional<Iota>> iotas_;
  bool changed_ = false;
};

}  // namespace

bool indexComparisons(Program& p) {
  Rewriter r(p);
  for (Kernel& k : p.kernels) {
    const VarExtents ext = k.extents();
    mapKernelExprs(k, [&](const ExprP& e) { return r.rewrite(e, ext); });
  }
  return r.changed();
}

}  // namespace kiln::loop
