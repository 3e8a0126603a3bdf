// tensor-fold-constants: an Elementwise node whose operands are all constants (weights, immediates, or
// IndexMaps of weights) is evaluated at compile time and becomes a weight: a boolean attention mask turned
// into 0/-inf, for one, is computed once here instead of by a kernel in every layer.
// Only results up to kMaxFoldedElements are folded, so a broadcast never inflates the weights much.
#include <functional>

#include "kiln/support/host_tensor.h"
#include "kiln/tensor/ir.h"

namespace kiln::tensor {
namespace {

constexpr int64_t kMaxFoldedElements = int64_t{1} << 22;

bool isConstant(const Graph& g, const Operand& o) {
  if (o.isImm()) return true;
  const Node& n = g.nodes[o.node];
  if (n.kind == Node::Kind::Weight) return true;
  return n.kind == Node::Kind::IndexMap && g.nodes[n.operands[0].node].kind == Node::Kind::Weight;
}

// The value of constant operand o at output index `at`.
float valueAt(const Graph& g, const Operand& o, const std::vector<int64_t>& at) {
  if (o.isImm()) return o.imm;
  const Node& n = g.nodes[o.node];
  const Node& w = n.kind == Node::Kind::Weight ? n : g.nodes[n.operands[0].node];
  int64_t flat = 0;
  for (size_t d = 0; d < w.shape.size(); ++d)
    flat = flat * w.shape[d] + (n.kind == Node::Kind::Weight ? at[d] : evaluate(n.index[d], at));
  return w.weight->values[flat];
}

}  // namespace

bool foldConstants(Graph& g) {
  bool changed = false;
  for (Node& n : g.nodes) {
    if (n.kind != Node::Kind::Elementwise || numel(n.shape) > kMaxFoldedElements) continue;
    bool constant = true;
    for (const Operand& o : n.operands) constant = constant && isConstant(g, o);
    if (!constant) continue;
    HostTensor t{n.dtype, n.shape, std::vector<float>(numel(n.shape))};
    std::vector<int64_t> at(n.shape.size(), 0);
    for (float& v : t.values) {
      float args[3] = {0.f, 0.f, 0.f};
      for (size_t i = 0; i < n.operands.size(); ++i) args[i] = valueAt(g, n.operands[i], at);
      v = applyFn(n.fn, args[0], args[1], args[2]);
      for (size_t d = at.size(); d-- > 0;) {
        if (++at[d] < n.shape[d]) break;
        at[d] = 0;
      }
    }
    t = fromBytes(t.dtype, t.shape, toBytes(t));  // round to the node's type
    auto data = std::make_shared<torch::WeightData>();
    data->name = "folded";
    data->values = std::move(t.values);
    n.kind = Node::Kind::Weight;
    n.name = "folded";
    n.weight = std::move(data);
    n.operands.clear();
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tensor
