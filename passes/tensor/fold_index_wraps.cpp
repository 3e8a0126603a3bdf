// tensor-fold-index-wraps: where(x < 0, x + n, x) of an x that is never negative becomes x.
// kiln wraps every integer index it gathers or scatters by (aten::index, gather, scatter, index_put read negative
// indices from the end, as PyTorch does). The expert ids a router picks (topk's indices clamped, a sort's positions and
// their inverse) never are negative, and a wrap left in place is a kernel of its own where a gather reads the
// index from memory (two per Mixtral layer).
// Never negative (and never NaN), by the node's own rule: a weight whose values are all >= 0; a comparison or logical
// op (0 or 1); a cast, IndexMap or Gather of such a value; Add, Mul, Min, Where's two branches, a Concat or a Sum or Max
// reduction of such values; Max with one such operand when the result is an integer (no NaN to propagate), with all
// of them otherwise.
// Pre: tensor-compose-index-maps has run (the three parts of a wrap read x itself). Post: the wraps' users read x; the
// wraps are dead (tensor-eliminate-dead-code removes them).
#include <vector>

#include "kiln/tensor/ir.h"

namespace kiln::tensor {
namespace {

bool integral(DType t) { return t == DType::I64 || t == DType::Bool; }

// Whether node n's values are all >= 0 (and none NaN), given its operands' facts.
bool neverNegative(const Graph& g, const Node& n, const std::vector<bool>& known) {
  auto fact = [&](const Operand& o) { return o.isImm() ? o.imm >= 0.f : static_cast<bool>(known[static_cast<size_t>(o.node)]); };
  auto all = [&](size_t from) {
    for (size_t i = from; i < n.operands.size(); ++i)
      if (!fact(n.operands[i])) return false;
    return true;
  };
  switch (n.kind) {
    case Node::Kind::Weight:
      for (float v : n.weight->values)
        if (!(v >= 0.f)) return false;
      return true;
    case Node::Kind::IndexMap:
    case Node::Kind::Gather: return fact(n.operands[0]);
    case Node::Kind::Concat: return all(0);
    case Node::Kind::Reduce: return all(0);  // Sum and Max (the only reductions)
    case Node::Kind::Elementwise: break;
    default: return false;
  }
  switch (n.fn) {
    case Fn::Lt: case Fn::Le: case Fn::Gt: case Fn::Ge: case Fn::Eq: case Fn::Ne: case Fn::And: case Fn::Not: return true;
    case Fn::Cast: case Fn::Add: case Fn::Mul: case Fn::Min: return all(0);
    case Fn::Where: return all(1);
    case Fn::Max:
      if (integral(n.dtype)) return fact(n.operands[0]) || fact(n.operands[1]);
      return all(0);
    default: return false;
  }
}

// The x of where(x < 0, x + n, x) (n any immediate), or -1.
int wrappedIndex(const Graph& g, const Node& n) {
  if (n.kind != Node::Kind::Elementwise || n.fn != Fn::Where || n.operands.size() != 3) return -1;
  const Operand &c = n.operands[0], &a = n.operands[1], &x = n.operands[2];
  if (c.isImm() || a.isImm() || x.isImm()) return -1;
  const Node &lt = g.nodes[static_cast<size_t>(c.node)], &add = g.nodes[static_cast<size_t>(a.node)];
  const bool isLt = lt.kind == Node::Kind::Elementwise && lt.fn == Fn::Lt && lt.operands.size() == 2 &&
                    lt.operands[0].node == x.node && lt.operands[1].isImm() && lt.operands[1].imm == 0.f;
  const bool isAdd = add.kind == Node::Kind::Elementwise && add.fn == Fn::Add && add.operands.size() == 2 &&
                     add.operands[0].node == x.node && add.operands[1].isImm();
  return isLt && isAdd && n.shape == g.nodes[static_cast<size_t>(x.node)].shape ? x.node : -1;
}

}  // namespace

bool foldIndexWraps(Graph& g) {
  std::vector<bool> known(g.nodes.size(), false);
  std::vector<int> replaced(g.nodes.size(), -1);  // a folded wrap's x
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    for (Operand& o : n.operands)  // nodes are in topological order: a wrap is folded before its users are seen
      if (!o.isImm() && replaced[static_cast<size_t>(o.node)] >= 0) o.node = replaced[static_cast<size_t>(o.node)];
    known[i] = neverNegative(g, n, known);
    const int x = wrappedIndex(g, n);
    if (x >= 0 && known[static_cast<size_t>(x)] && g.nodes[static_cast<size_t>(x)].dtype == n.dtype) {
      replaced[i] = x;
      known[i] = true;
    }
  }
  bool changed = false;
  for (int r : replaced) changed = changed || r >= 0;
  for (int& o : g.outputs)
    if (replaced[static_cast<size_t>(o)] >= 0) o = replaced[static_cast<size_t>(o)];
  return changed;
}

}  // namespace kiln::tensor
