// tensor-fold-constants: elementwise work on constants is done at compile time.
#include <gtest/gtest.h>

#include "test_support.h"

#include <cmath>
#include <filesystem>

#include "kiln/driver/pipeline.h"

namespace kiln::tensor {
namespace {


bool constantOperand(const Graph& g, const Operand& o) {
  if (o.isImm()) return true;
  const Node& n = g.nodes[o.node];
  return n.kind == Node::Kind::Weight ||
         (n.kind == Node::Kind::IndexMap && g.nodes[n.operands[0].node].kind == Node::Kind::Weight);
}

TEST(FoldConstants, NoElementwiseOfConstantsIsLeft) {
  Compiled c = compileModel(test::fixturePath("hf_llama_tiny"), {}, PipelineOptions{}, "tensor");
  for (const Node& n : c.tensorIR.nodes) {
    if (n.kind != Node::Kind::Elementwise) continue;
    bool allConstant = true;
    for (const Operand& o : n.operands) allConstant = allConstant && constantOperand(c.tensorIR, o);
    EXPECT_FALSE(allConstant) << fnName(n.fn) << " of constants left at " << n.origin;
  }
}

TEST(FoldConstants, TheBooleanMaskBecomesZeroOrMinusInfinity) {
  // transformers passes sdpa a boolean mask (built from shapes, so a constant); where(mask, 0, -inf) folds.
  Compiled c = compileModel(test::fixturePath("hf_llama_tiny"), {}, PipelineOptions{}, "tensor");
  int folded = 0;
  for (const Node& n : c.tensorIR.nodes) {
    if (n.kind != Node::Kind::Weight || n.name != "folded") continue;
    ++folded;
    ASSERT_EQ(n.shape, (Shape{1, 1, 16, 16}));
    const auto& v = n.weight->values;
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        float x = v[i * 16 + j];
        if (j <= i) EXPECT_EQ(x, 0.f) << i << "," << j;
        else EXPECT_TRUE(std::isinf(x) && x < 0) << i << "," << j << " holds " << x;
      }
  }
  EXPECT_EQ(folded, 2);  // one per decoder layer
}

TEST(FoldConstants, LeavesWorkOnInputsAlone) {
  Compiled a = compileModel(test::fixturePath("elementwise"), {}, PipelineOptions{}, "tensor");
  for (const Node& n : a.tensorIR.nodes) EXPECT_NE(n.name, "folded");
}

}  // namespace
}  // namespace kiln::tensor
