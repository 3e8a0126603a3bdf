// The Loop-IR interpreter: executes each kernel's loop nest literally, in f32, on the CPU.
#include <cmath>
#include <limits>

#include "kiln/loop/ir.h"
#include "kiln/support/error.h"

namespace kiln::loop {

float roundTo(DType t, float v) {
  switch (t) {
    case DType::F32: return v;
    case DType::F16: return static_cast<float>(static_cast<_Float16>(v));
    case DType::BF16: {
      HostTensor h{DType::BF16, {1}, {v}};
      return fromBytes(DType::BF16, {1}, toBytes(h)).values[0];
    }
    case DType::I64: return std::trunc(v);
    case DType::Bool: return v != 0.f ? 1.f : 0.f;
  }
  return v;
}

float evalExpr(const Expr& e, const std::vector<int64_t>& env, const std::vector<std::vector<float>>& buffers,
               const std::vector<Buffer>& info, const std::vector<float>& acc, const IndexLoader* loader) {
  switch (e.kind) {
    case Expr::Kind::Imm: return e.imm;
    case Expr::Kind::Acc: return acc[e.stage];
    case Expr::Kind::Load: {
      const Shape& s = info[e.buffer].shape;
      int64_t flat = 0;
      for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + evaluate(e.index[d], env, loader);
      return buffers[e.buffer][flat];
    }
    case Expr::Kind::Apply: {
      float a = evalExpr(*e.args[0], env, buffers, info, acc, loader);
      if (e.fn == Fn::Cast) return roundTo(e.castTo, a);
      float b = e.args.size() > 1 ? evalExpr(*e.args[1], env, buffers, info, acc, loader) : 0.f;
      float c = e.args.size() > 2 ? evalExpr(*e.args[2], env, buffers, info, acc, loader) : 0.f;
      return tensor::applyFn(e.fn, a, b, c);
    }
    case Expr::Kind::Select:
      return evaluate(e.index[0], env, loader) < evaluate(e.index[1], env, loader)
                 ? evalExpr(*e.args[0], env, buffers, info, acc, loader)
                 : evalExpr(*e.args[1], env, buffers, info, acc, loader);
  }
  return 0.f;
}

namespace {

// An attention kernel's row (the row axes set in env): w(j) = exp(s(j) - max s) for every key j, and their sum.
void rowWeights(const OnlineSoftmax& a, std::vector<int64_t>& env, const std::vector<std::vector<float>>& buf,
                const std::vector<Buffer>& info, const IndexLoader* loader, std::vector<float>& weights, float& sum) {
  weights.assign(a.key.extent, 0.f);
  float maximum = -std::numeric_limits<float>::infinity();
  std::vector<float> dot(1);
  for (int64_t j = 0; j < a.key.extent; ++j) {
    env[a.key.var] = j;
    dot[0] = 0.f;
    for (auto& d : a.dot.axes) env[d.var] = 0;
    for (bool more = true; more;) {
      dot[0] += evalExpr(*a.dot.value, env, buf, info, dot, loader);
      more = false;
      for (size_t d = a.dot.axes.size(); d-- > 0 && !more;) {
        more = ++env[a.dot.axes[d].var] < a.dot.axes[d].extent;
        if (!more) env[a.dot.axes[d].var] = 0;
      }
    }
    weights[j] = evalExpr(*a.score, env, buf, info, dot, loader);
    maximum = std::max(maximum, weights[j]);
  }
  sum = 0.f;
  if (a.emptyRowsZero && maximum == -std::numeric_limits<float>::infinity()) {  // every score -inf: weights 0, acc0 = 0
    std::fill(weights.begin(), weights.end(), 0.f);
    sum = 1.f;
    return;
  }
  for (float& w : weights) sum += (w = std::exp(w - maximum));
}

}  // namespace

std::vector<HostTensor> interpret(const Program& p, const std::vector<HostTensor>& inputs) {
  KILN_ASSERT(inputs.size() == p.inputs.size(), "{} inputs for {} model inputs", inputs.size(), p.inputs.size());
  std::vector<std::vector<float>> buf(p.buffers.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& info = p.buffers[b];
    if (info.kind == Buffer::Kind::Weight) buf[b] = info.weight->values;
    else buf[b].assign(numel(info.shape), std::numeric_limits<float>::quiet_NaN());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_ASSERT(inputs[i].values.size() == buf[p.inputs[i]].size(), "input {} has {} elements, expected {}", i,
                inputs[i].values.size(), buf[p.inputs[i]].size());
    buf[p.inputs[i]] = inputs[i].values;
  }
  IndexLoader loader = [&](int b, int64_t flat) {
    KILN_ASSERT(flat >= 0 && flat < static_cast<int64_t>(buf[b].size()), "index read {}[{}] out of bounds", p.buffers[b].name, flat);
    return static_cast<int64_t>(buf[b][flat]);
  };
  for (const Kernel& k : p.kernels) {
    std::vector<int64_t> env(k.maxVar() + 1, 0);
    std::vector<float>& out = buf[k.output];
    DType outType = p.buffers[k.output].dtype;
    // Odometer over axes: advance the last axis first.
    auto advance = [&](const std::vector<Axis>& axes) {
      for (size_t d = axes.size(); d-- > 0;) {
        if (++env[axes[d].var] < axes[d].extent) return true;
        env[axes[d].var] = 0;
      }
      return false;
    };
    int64_t points = k.parallelPoints(), perRow = points / std::max<int64_t>(1, k.rowPoints());
    std::vector<float> accs(std::max<size_t>(k.stages.size(), k.attention ? 1 : 0), 0.f);
    std::vector<float> weights;  // attention: the row's w(j)
    float weightSum = 0.f;
    for (int64_t flat = 0; flat < points; ++flat) {
      if (k.attention && flat % perRow == 0) rowWeights(*k.attention, env, buf, p.buffers, &loader, weights, weightSum);
      if (k.attention) {  // acc0 = sum_j w(j) value(j, e) / sum_j w(j)
        float sum = 0.f;
        for (int64_t j = 0; j < k.attention->key.extent; ++j) {
          env[k.attention->key.var] = j;
          sum += weights[j] * evalExpr(*k.attention->value, env, buf, p.buffers, accs, &loader);
        }
        accs[0] = sum / weightSum;
      }
      if (flat % perRow == 0)  // a new row: run the stages
        for (size_t s = 0; s < k.stages.size(); ++s) {
          const Reduction& r = k.stages[s];
          float acc = tensor::reduceInit(r.fn);
          for (auto& a : r.axes) env[a.var] = 0;
          do {
            acc = tensor::reduceCombine(r.fn, acc, evalExpr(*r.value, env, buf, p.buffers, accs, &loader));
          } while (advance(r.axes));
          accs[s] = acc;
        }
      out[flat] = roundTo(outType, evalExpr(*k.result, env, buf, p.buffers, accs, &loader));
      advance(k.parallel);
    }
  }
  std::vector<HostTensor> result;
  for (int o : p.outputs) result.push_back(HostTensor{p.buffers[o].dtype, p.buffers[o].shape, buf[o]});
  return result;
}

}  // namespace kiln::loop
