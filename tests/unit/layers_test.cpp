// Kernels attributed to decoder layers by the weights they read (kiln/support/layers.h): `kiln compile -v` and
// `--explain-fusion` count kernels per layer (issue 43).
#include <gtest/gtest.h>

#include "cli_support.h"
#include "kiln/support/layers.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;

TEST(Layers, TheLayerNumberOfAWeight) {
  EXPECT_EQ(layerOfWeight("model.layers.12.mlp.up_proj.weight"), 12);
  EXPECT_EQ(layerOfWeight("w.model.model.layers.0.self_attn.q_proj.weight"), 0);
  EXPECT_EQ(layerOfWeight("model.transformer.h.3.attn.c_attn.weight"), 3);
  EXPECT_EQ(layerOfWeight("encoder.block.7.layer.1.DenseReluDense.wi.weight"), 7);  // the first such component
  EXPECT_EQ(layerOfWeight("model.model.embed_tokens.weight"), -1);
  EXPECT_EQ(layerOfWeight("model.lm_head.weight"), -1);
  EXPECT_EQ(layerOfWeight("model.layers.x.weight"), -1);
  EXPECT_EQ(layerOfWeight("t12"), -1);
}

TEST(Layers, KernelsWithoutLayerWeightsJoinTheirNeighbours) {
  const std::vector<std::vector<std::string>> reads = {
      {"embed_tokens.weight"},                   // before the layers
      {"layers.0.norm.weight", "embed_tokens.weight"},
      {},                                        // attention: layer 0
      {"rotary.cos"},                            // a constant table of no layer: still layer 0
      {"layers.1.q.weight"},
      {},                                        // the last layer's residual add
      {"norm.weight"},                           // after
      {},                                        // after
      {"lm_head.weight"}};
  const std::vector<int> want = {kBeforeLayers, 0, 0, 0, 1, 1, kAfterLayers, kAfterLayers, kAfterLayers};
  EXPECT_EQ(layersOfKernels(reads), want);
  EXPECT_EQ(layerSummary(want), "kernels per layer: layer 0: 3, layer 1: 2, 1 before the layers, 3 after");
  EXPECT_EQ(layerSummary({0, 0, 1, 1, kAfterLayers}), "2 kernels per layer in layers 0-1 (4), 0 before the layers, 1 after");
  EXPECT_EQ(layerSummary({kBeforeLayers, kBeforeLayers}), "");
}

// The count kiln prints for the 2-layer Llama fixtures (the fewer-kernels issue lowers it; this records where it is).
// Loop IR (--explain-fusion) has a kernel per rotary where Kernel IR launches q's and k's together
// (kernel-merge-launches). The decoder step: q's and k's rotary with the position counter, and the two cache writes, one
// launch each; its attention writes bf16 itself. With the small kernels inside the product before them
// (kernel-finish-in-last-block, off by default), 5 a layer: q/k/v with the rotaries, the position counter and the cache
// writes; attention; o_proj with the next norm; gate/up; down with the next layer's norm. Layer 0 has one more: the
// embedding with the first norm.
TEST(Layers, CompileVerbosePrintsKernelsPerLayer) {
  Result r = kiln({"compile", test::fixturePath("hf_llama_tiny"), "--ir", "kernel", "-v"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.err.find("kiln: 18 kernels: 8 kernels per layer in layers 0-1 (16), 0 before the layers, 2 after"),
            std::string::npos) << describe(r);
  Result step = kiln({"compile", test::fixturePath("hf_llama_decode_tiny"), "--ir", "kernel", "-v"});
  ASSERT_EQ(step.code, 0) << describe(step);
  EXPECT_NE(step.err.find("kiln: 21 kernels: 9 kernels per layer in layers 0-1 (18), 1 before the layers, 2 after"),
            std::string::npos) << describe(step);
  Result tails = kiln({"compile", test::fixturePath("hf_llama_decode_tiny"), "--ir", "kernel", "-v", "--enable-pass",
                       "kernel-finish-in-last-block"});
  ASSERT_EQ(tails.code, 0) << describe(tails);
  EXPECT_NE(tails.err.find("kiln: 12 kernels: kernels per layer: layer 0: 6, layer 1: 5, 0 before the layers, 1 after"),
            std::string::npos) << describe(tails);
  // With the norms as stages of the products after them as well (loop-fuse-norm-products, off by default): 5 a layer,
  // the first norm inside q/k/v and the final one inside the LM head (an f32 model: its loads are no wider than the LM
  // head's).
  Result fused = kiln({"compile", test::fixturePath("hf_llama_decode_tiny"), "--ir", "kernel", "-v", "--enable-pass",
                       "loop-fuse-norm-products", "--enable-pass", "kernel-finish-in-last-block"});
  ASSERT_EQ(fused.code, 0) << describe(fused);
  EXPECT_NE(fused.err.find("kiln: 12 kernels: 5 kernels per layer in layers 0-1 (10), 1 before the layers, 1 after"),
            std::string::npos) << describe(fused);
  Result fusion = kiln({"compile", test::fixturePath("hf_llama_tiny"), "--explain-fusion"});
  ASSERT_EQ(fusion.code, 0) << describe(fusion);
  EXPECT_NE(fusion.out.find("// 9 kernels per layer in layers 0-1 (18)"), std::string::npos) << fusion.out;
  EXPECT_NE(fusion.out.find("\n// layer 1\n"), std::string::npos) << fusion.out;
}

}  // namespace
}  // namespace kiln
