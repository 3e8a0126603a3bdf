// tensor-compose-index-maps: an IndexMap of an IndexMap becomes one IndexMap (the inner index function
// substituted into the outer), and an IndexMap that maps every output index to itself is removed.
// Pre/post: a valid Tensor IR graph; the composed maps may leave inner maps dead (eliminate-dead-code
// removes them).
#include "kiln/tensor/ir.h"

namespace kiln::tensor {
namespace {

bool isIdentity(const Graph& g, const Node& n) {
  if (n.kind != Node::Kind::IndexMap || g.nodes[n.operands[0].node].shape != n.shape) return false;
  for (size_t d = 0; d < n.index.size(); ++d)
    if (!sameIdx(n.index[d], outVar(static_cast<int>(d)))) return false;
  return true;
}

}  // namespace

bool composeIndexMaps(Graph& g) {
  bool changed = false;
  std::vector<int> replace(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) replace[i] = static_cast<int>(i);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    for (Operand& o : n.operands)
      if (!o.isImm()) o.node = replace[o.node];
    if (n.kind != Node::Kind::IndexMap) continue;
    const Node& inner = g.nodes[n.operands[0].node];
    if (inner.kind == Node::Kind::IndexMap) {
      VarExtents ext;
      for (size_t d = 0; d < n.shape.size(); ++d) ext[static_cast<int>(d)] = n.shape[d];
      std::vector<Idx> composed;
      for (const Idx& e : inner.index)
        composed.push_back(simplify(substitute(e, [&](int v, const std::string&) { return n.index.at(v); }), ext));
      n.index = std::move(composed);
      n.operands[0] = inner.operands[0];
      changed = true;
    }
    if (isIdentity(g, n)) {
      replace[i] = n.operands[0].node;
      changed = true;
    }
  }
  for (int& o : g.outputs) o = replace[o];
  return changed;
}

}  // namespace kiln::tensor
