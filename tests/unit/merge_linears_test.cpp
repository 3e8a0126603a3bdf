// tensor-merge-parallel-linears: q, k and v become one product against stacked weights; gate and up, whose
// results meet in silu(gate) * up, are left for loop-fuse-rows.
#include <gtest/gtest.h>

#include "test_support.h"

#include <filesystem>

#include "kiln/driver/pipeline.h"

namespace kiln::tensor {
namespace {


std::vector<const Node*> stacked(const Graph& g) {
  std::vector<const Node*> out;
  for (const Node& n : g.nodes)
    if (n.kind == Node::Kind::Weight && n.name.rfind("stacked(", 0) == 0) out.push_back(&n);
  return out;
}

TEST(MergeParallelLinears, StacksQueryKeyAndValueWeights) {
  Compiled c = compileModel(test::fixturePath("hf_llama_tiny"), {}, PipelineOptions{}, "tensor");
  auto s = stacked(c.tensorIR);
  ASSERT_EQ(s.size(), 2u);  // one per decoder layer
  EXPECT_NE(s[0]->name.find("q_proj"), std::string::npos) << s[0]->name;
  EXPECT_NE(s[0]->name.find("k_proj"), std::string::npos) << s[0]->name;
  EXPECT_NE(s[0]->name.find("v_proj"), std::string::npos) << s[0]->name;
  EXPECT_EQ(s[0]->shape, (Shape{64 + 32 + 32, 64}));  // 4 query heads and 2 key/value heads of 16
  EXPECT_EQ(s[0]->name.find("gate_proj"), std::string::npos);
}

TEST(MergeParallelLinears, StackedRowsAreTheWeightsInOrder) {
  Compiled c = compileModel(test::fixturePath("attention"), {}, PipelineOptions{}, "tensor");
  auto s = stacked(c.tensorIR);
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(s[0]->shape, (Shape{96, 32}));
  // Find the original q/k/v weights in the Torch IR and compare row blocks.
  std::vector<std::shared_ptr<const torch::WeightData>> originals;
  for (const char* name : {"q_proj.weight", "k_proj.weight", "v_proj.weight"})
    for (const auto& v : c.torchIR.values)
      if (v.kind == torch::Value::Kind::Weight && v.weight->name == name) originals.push_back(v.weight);
  ASSERT_EQ(originals.size(), 3u);
  for (size_t b = 0; b < 3; ++b)
    for (size_t i = 0; i < 32 * 32; ++i) ASSERT_EQ(s[0]->weight->values[b * 32 * 32 + i], originals[b]->values[i]) << b << " " << i;
}

TEST(MergeParallelLinears, LeavesGateAndUpToRowFusion) {
  Compiled c = compileModel(test::fixturePath("mlp"), {}, PipelineOptions{}, "loop");
  EXPECT_TRUE(stacked(c.tensorIR).empty());
  EXPECT_EQ(c.loopIR.kernels.size(), 2u) << loop::print(c.loopIR);
}

}  // namespace
}  // namespace kiln::tensor
