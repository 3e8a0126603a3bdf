// torch::appendGreedyToken, applied at import where PipelineOptions::greedyTokens asks (kiln generate's entry points,
// not a pass of the pipeline: it changes what the forward returns): the forward also returns the
// greedy next token at every position, the argmax over the last axis of its first output (the logits [batch, tokens,
// vocabulary] -> i64 [batch, tokens], the first of equal maxima, NaN counting as the maximum, as torch.argmax), as its
// second output. A decode step then hands back 8 bytes a token for the host to read instead of the vocabulary's logits,
// and the pick runs on the GPU inside the step's forward.
#include "kiln/support/error.h"
#include "kiln/torch/ir.h"

namespace kiln::torch {

bool appendGreedyToken(Graph& g) {
  KILN_ASSERT(g.outputs.size() > g.states.size(), "{}: greedy tokens of a forward without outputs of its own", g.modelName);
  const int logits = g.outputs[0];
  const Value& v = g.values[static_cast<size_t>(logits)];
  if (v.shape.empty() || v.dtype == DType::I64 || v.dtype == DType::Bool)
    userError("{}: its first output is {}[{}], not logits [..., vocabulary] to pick the greedy token from", g.modelName,
              dtypeName(v.dtype), shapeString(v.shape));
  Value dim{Value::Kind::Constant, "", DType::I64, {}, int64_t{-1}, nullptr};
  Value keep{Value::Kind::Constant, "", DType::Bool, {}, false, nullptr};
  Value token{Value::Kind::Tensor, "", DType::I64, Shape(v.shape.begin(), v.shape.end() - 1), None{}, nullptr};
  const int dimId = g.addValue(std::move(dim)), keepId = g.addValue(std::move(keep)), tokenId = g.addValue(std::move(token));
  g.nodes.push_back(Node{"aten::argmax", {logits, dimId, keepId}, {tokenId}, {}});
  g.outputs.insert(g.outputs.begin() + 1, tokenId);
  return true;
}

}  // namespace kiln::torch
