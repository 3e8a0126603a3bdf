#include <vector>

#include "kiln/support/error.h"
#include "kiln/torch/ir.h"

namespace kiln::torch {

void verify(const Graph& g) {
  const int n = static_cast<int>(g.values.size());
  std::vector<bool> defined(n, false);
  for (int i = 0; i < n; ++i) {
    auto k = g.values[i].kind;
    if (k == Value::Kind::Constant || k == Value::Kind::Weight || k == Value::Kind::Input) defined[i] = true;
    if (k == Value::Kind::Weight) {
      KILN_ASSERT(g.values[i].weight, "weight value {} has no data", i);
      KILN_ASSERT(static_cast<int64_t>(g.values[i].weight->values.size()) == numel(g.values[i].shape),
                  "weight '{}' holds {} elements for shape {}", g.values[i].weight->name, g.values[i].weight->values.size(),
                  shapeString(g.values[i].shape));
    }
  }
  for (const Node& node : g.nodes) {
    for (int id : node.inputs) {
      KILN_ASSERT(id >= 0 && id < n, "{} uses value id {} out of range", node.op, id);
      KILN_ASSERT(defined[id], "{} at {} uses a value before it is defined", node.op, node.loc.str());
    }
    for (int id : node.outputs) {
      KILN_ASSERT(id >= 0 && id < n && g.values[id].kind == Value::Kind::Tensor, "{} has a non-tensor result", node.op);
      KILN_ASSERT(!defined[id], "{} redefines a value", node.op);
      defined[id] = true;
    }
  }
  for (int id : g.outputs) KILN_ASSERT(id >= 0 && id < n && defined[id] && g.values[id].isTensor(), "graph output {} is not a defined tensor", id);
}

}  // namespace kiln::torch
