// The Tensor level's reference evaluation (kiln/tensor/ir.h evaluate): every node in f32, one rank's graph or several
// side by side.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kiln/support/error.h"
#include "kiln/tensor/ir.h"

namespace kiln::tensor {
namespace {

std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// Calls f(flat, index) for every point of shape s in row-major order.
void forEachPoint(const Shape& s, const std::function<void(int64_t, const std::vector<int64_t>&)>& f) {
  const int64_t total = numel(s);
  std::vector<int64_t> at(s.size(), 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    f(flat, at);
    for (size_t d = s.size(); d-- > 0;) {
      if (++at[d] < s[d]) break;
      at[d] = 0;
    }
  }
}

float rounded(float v, DType t) {
  switch (t) {
    case DType::Bool: return v != 0.f ? 1.f : 0.f;
    case DType::I64: return std::trunc(v);
    default: return v;  // the reference is f32 throughout, as the checks' f32 evaluation is
  }
}

std::vector<float> evaluateNode(const Graph& g, const Node& n, const std::vector<std::vector<float>>& v) {
  std::vector<float> out(static_cast<size_t>(numel(n.shape)));
  auto operand = [&](size_t k) -> const std::vector<float>& { return v[static_cast<size_t>(n.operands[k].node)]; };
  switch (n.kind) {
    case Node::Kind::Weight: return n.weight->values;
    case Node::Kind::Elementwise:
      for (size_t i = 0; i < out.size(); ++i) {
        float a[3] = {0.f, 0.f, 0.f};
        for (size_t k = 0; k < n.operands.size(); ++k) a[k] = n.operands[k].isImm() ? n.operands[k].imm : operand(k)[i];
        out[i] = rounded(applyFn(n.fn, a[0], a[1], a[2]), n.dtype);
      }
      return out;
    case Node::Kind::Reduce: {
      const Shape& in = g.nodes[static_cast<size_t>(n.operands[0].node)].shape;
      const std::vector<int64_t> outStrides = stridesOf(n.shape);
      std::fill(out.begin(), out.end(), reduceInit(n.reduceFn));
      forEachPoint(in, [&](int64_t flat, const std::vector<int64_t>& at) {
        int64_t o = 0;
        for (size_t d = 0; d < at.size(); ++d)
          if (std::find(n.axes.begin(), n.axes.end(), static_cast<int>(d)) == n.axes.end()) o += at[d] * outStrides[d];
        out[static_cast<size_t>(o)] = reduceCombine(n.reduceFn, out[static_cast<size_t>(o)], operand(0)[static_cast<size_t>(flat)]);
      });
      return out;
    }
    case Node::Kind::IndexMap: {
      const std::vector<int64_t> inStrides = stridesOf(g.nodes[static_cast<size_t>(n.operands[0].node)].shape);
      const IndexLoader load = [&](int buffer, int64_t flat) {
        return static_cast<int64_t>(v[static_cast<size_t>(buffer)][static_cast<size_t>(flat)]);
      };
      forEachPoint(n.shape, [&](int64_t flat, const std::vector<int64_t>& at) {
        int64_t from = 0;
        for (size_t d = 0; d < n.index.size(); ++d) from += evaluate(n.index[d], at, &load) * inStrides[d];
        out[static_cast<size_t>(flat)] = operand(0)[static_cast<size_t>(from)];
      });
      return out;
    }
    case Node::Kind::Gather: {
      const Shape& table = g.nodes[static_cast<size_t>(n.operands[0].node)].shape;
      const int64_t rows = table.at(0), width = table.at(1);
      for (size_t r = 0; r < operand(1).size(); ++r) {
        const int64_t id = std::clamp<int64_t>(static_cast<int64_t>(operand(1)[r]), 0, rows - 1);
        std::copy_n(operand(0).begin() + id * width, width, out.begin() + static_cast<int64_t>(r) * width);
      }
      return out;
    }
    case Node::Kind::Concat: {
      const int axis = n.axes.at(0);
      int64_t begin = 0;
      for (size_t k = 0; k < n.operands.size(); ++k) {
        const Shape& s = g.nodes[static_cast<size_t>(n.operands[k].node)].shape;
        const std::vector<int64_t> outStrides = stridesOf(n.shape);
        forEachPoint(s, [&](int64_t flat, const std::vector<int64_t>& at) {
          int64_t o = 0;
          for (size_t d = 0; d < at.size(); ++d) o += (at[d] + (static_cast<int>(d) == axis ? begin : 0)) * outStrides[d];
          out[static_cast<size_t>(o)] = operand(k)[static_cast<size_t>(flat)];
        });
        begin += s[static_cast<size_t>(axis)];
      }
      return out;
    }
    case Node::Kind::Input:
    case Node::Kind::AllReduce: break;  // the caller's
  }
  return out;
}

}  // namespace

std::vector<HostTensor> evaluate(const std::vector<const Graph*>& ranks, const std::vector<HostTensor>& inputs) {
  KILN_ASSERT(!ranks.empty(), "evaluate: no graph");
  const Graph& first = *ranks[0];
  if (inputs.size() != first.inputs.size())
    userError("kiln: '{}' takes {} inputs, got {}", first.modelName, first.inputs.size(), inputs.size());
  for (const Graph* g : ranks)
    KILN_ASSERT(g->nodes.size() == first.nodes.size(), "evaluate: ranks of different graphs");
  std::vector<std::vector<std::vector<float>>> values(ranks.size(), std::vector<std::vector<float>>(first.nodes.size()));
  for (size_t i = 0; i < first.nodes.size(); ++i) {
    const Node& n = first.nodes[i];
    if (n.kind == Node::Kind::AllReduce) {
      std::vector<float> sum(static_cast<size_t>(numel(n.shape)), 0.f);
      for (auto& rank : values)
        for (size_t e = 0; e < sum.size(); ++e) sum[e] += rank[static_cast<size_t>(n.operands[0].node)][e];
      for (auto& rank : values) rank[i] = sum;
      continue;
    }
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (n.kind == Node::Kind::Input) {
        const size_t at = static_cast<size_t>(std::find(first.inputs.begin(), first.inputs.end(), static_cast<int>(i)) -
                                              first.inputs.begin());
        KILN_ASSERT(at < inputs.size(), "evaluate: input %{} is not listed", i);
        values[r][i] = inputs[at].values;
      } else {
        values[r][i] = evaluateNode(*ranks[r], ranks[r]->nodes[i], values[r]);
      }
    }
  }
  std::vector<HostTensor> out;
  for (int o : first.outputs) {
    const Node& n = first.nodes[static_cast<size_t>(o)];
    out.push_back(HostTensor{n.dtype, n.shape, values[0][static_cast<size_t>(o)]});
  }
  return out;
}

}  // namespace kiln::tensor
