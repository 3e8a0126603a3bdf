#include "kiln/support/error.h"
#include "kiln/tensor/ir.h"

namespace kiln::tensor {

void verify(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (const Operand& o : n.operands)
      KILN_ASSERT(o.isImm() || (o.node >= 0 && o.node < static_cast<int>(i)), "%{} uses %{} before its definition", i, o.node);
    auto in = [&](int k) -> const Node& { return g.nodes[n.operands.at(k).node]; };
    switch (n.kind) {
      case Node::Kind::Input:
      case Node::Kind::Weight: KILN_ASSERT(n.operands.empty(), "%{}: leaf with operands", i); break;
      case Node::Kind::Elementwise:
        KILN_ASSERT(static_cast<int>(n.operands.size()) == arity(n.fn), "%{}: {} with {} operands", i, fnName(n.fn), n.operands.size());
        for (const Operand& o : n.operands)
          KILN_ASSERT(o.isImm() || g.nodes[o.node].shape == n.shape, "%{}: operand %{} has shape [{}], result [{}]", i, o.node,
                      shapeString(g.nodes[o.node].shape), shapeString(n.shape));
        break;
      case Node::Kind::Reduce: {
        Shape expect = in(0).shape;
        for (int a : n.axes) {
          KILN_ASSERT(a >= 0 && a < static_cast<int>(expect.size()), "%{}: reduce axis {} out of range", i, a);
          expect[a] = 1;
        }
        KILN_ASSERT(expect == n.shape, "%{}: reduce result shape [{}], expected [{}]", i, shapeString(n.shape), shapeString(expect));
        break;
      }
      case Node::Kind::IndexMap: {
        const Shape& src = in(0).shape;
        KILN_ASSERT(n.index.size() == src.size(), "%{}: {} index expressions for a rank-{} input", i, n.index.size(), src.size());
        VarExtents ext;
        for (size_t d = 0; d < n.shape.size(); ++d) ext[static_cast<int>(d)] = n.shape[d];
        for (size_t d = 0; d < src.size(); ++d) {
          forEachVar(n.index[d], [&](int v) { KILN_ASSERT(v < static_cast<int>(n.shape.size()), "%{}: index uses o{} beyond rank", i, v); });
          if (numel(n.shape) == 0) continue;
          auto r = idxRange(n.index[d], ext);
          KILN_ASSERT(r && r->first >= 0 && r->second < src[d], "%{}: index {} may leave [0, {})", i, toString(n.index[d]), src[d]);
        }
        break;
      }
      case Node::Kind::Gather: {
        KILN_ASSERT(n.operands.size() == 2, "%{}: gather takes a table and indices", i);
        Shape expect = in(1).shape;
        expect.push_back(in(0).shape.at(1));
        KILN_ASSERT(in(0).shape.size() == 2 && expect == n.shape, "%{}: gather shape [{}]", i, shapeString(n.shape));
        break;
      }
      case Node::Kind::Concat: {
        int axis = n.axes.at(0);
        int64_t total = 0;
        for (size_t k = 0; k < n.operands.size(); ++k) {
          Shape s = in(static_cast<int>(k)).shape;
          KILN_ASSERT(s.size() == n.shape.size(), "%{}: concat operand rank", i);
          total += s[axis];
          s[axis] = n.shape[axis];
          KILN_ASSERT(s == n.shape, "%{}: concat operand %{} has shape [{}]", i, n.operands[k].node, shapeString(in(static_cast<int>(k)).shape));
        }
        KILN_ASSERT(total == n.shape[axis], "%{}: concat extents add to {}, result has {}", i, total, n.shape[axis]);
        break;
      }
      case Node::Kind::AllReduce:
        KILN_ASSERT(n.operands.size() == 1 && in(0).shape == n.shape && in(0).dtype == n.dtype,
                    "%{}: all_reduce of another shape or type", i);
        break;
    }
  }
  for (int o : g.outputs) KILN_ASSERT(o >= 0 && o < static_cast<int>(g.nodes.size()), "output %{} out of range", o);
}

}  // namespace kiln::tensor
