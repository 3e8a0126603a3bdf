// tensor-eliminate-dead-code: removes nodes that reach no output and renumbers the rest in order.
// Inputs are always kept (they are the compiled model's signature).
#include "kiln/tensor/ir.h"

namespace kiln::tensor {

bool eliminateDeadCode(Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (int o : g.outputs) live[o] = true;
  for (int i : g.inputs) live[i] = true;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (live[i])
      for (const Operand& o : g.nodes[i].operands)
        if (!o.isImm()) live[o.node] = true;
  std::vector<int> newId(g.nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i]) continue;
    Node n = std::move(g.nodes[i]);
    for (Operand& o : n.operands)
      if (!o.isImm()) o.node = newId[o.node];
    newId[i] = static_cast<int>(kept.size());
    kept.push_back(std::move(n));
  }
  bool changed = kept.size() != g.nodes.size();
  g.nodes = std::move(kept);
  for (int& o : g.outputs) o = newId[o];
  for (int& i : g.inputs) i = newId[i];
  return changed;
}

}  // namespace kiln::tensor
