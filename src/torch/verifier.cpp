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
  // The states' inputs and outputs close the lists, in `states` order, each the shape and dtype of the other.
  KILN_ASSERT(g.states.size() <= g.inputs.size() && g.states.size() <= g.outputs.size(), "more states than inputs or outputs");
  for (size_t i = 0; i < g.states.size(); ++i) {
    const State& st = g.states[i];
    KILN_ASSERT(g.inputs[g.inputs.size() - g.states.size() + i] == st.input, "state '{}' is not input {}", st.name,
                g.inputs.size() - g.states.size() + i);
    KILN_ASSERT(g.outputs[g.outputs.size() - g.states.size() + i] == st.output, "state '{}' is not output {}", st.name,
                g.outputs.size() - g.states.size() + i);
    const Value &in = g.values[st.input], &out = g.values[st.output];
    KILN_ASSERT(in.kind == Value::Kind::Input && in.dtype == out.dtype && in.shape == out.shape,
                "state '{}' changes type from {}[{}] to {}[{}]", st.name, dtypeName(in.dtype), shapeString(in.shape),
                dtypeName(out.dtype), shapeString(out.shape));
    KILN_ASSERT(st.initial && static_cast<int64_t>(st.initial->values.size()) == numel(in.shape),
                "state '{}' has no initial values of its shape", st.name);
  }
}

}  // namespace kiln::torch
