// torch-eliminate-dead-code: removes nodes none of whose results reach a graph output.
// Pre: nodes topologically ordered. Post: same order, every remaining node contributes to an output.
#include <vector>

#include "kiln/torch/ir.h"

namespace kiln::torch {

bool eliminateDeadCode(Graph& g) {
  std::vector<bool> live(g.values.size(), false);
  for (int id : g.outputs) live[id] = true;
  std::vector<Node> kept;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    bool used = false;
    for (int id : it->outputs) used = used || live[id];
    if (!used) continue;
    for (int id : it->inputs) live[id] = true;
    kept.push_back(std::move(*it));
  }
  bool changed = kept.size() != g.nodes.size();
  g.nodes.assign(std::make_move_iterator(kept.rbegin()), std::make_move_iterator(kept.rend()));
  return changed;
}

}  // namespace kiln::torch
