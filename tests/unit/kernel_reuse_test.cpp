// kernel-lower-from-tile lowers each distinct kernel once and copies it for identical ones (every decoder layer of
// a Llama after the first): the copies must be exactly what lowering them one by one gives.
#include <gtest/gtest.h>

#include "kiln/cuda/emitter.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/tile/reuse_key.h"
#include "test_support.h"

namespace kiln {
namespace {

struct Lowered {
  kernel::Program program;
  kernel::LowerStats stats;
};

Lowered lower(const tile::Program& tp, bool reuse) {
  Lowered l;
  l.program = kernel::lowerFromTile(tp, kernel::LowerOptions{reuse}, &l.stats);
  return l;
}

class KernelReuse : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelReuse, CopiesAreWhatLoweringEachKernelGives) {
  Compiled c = compileModel(test::fixturePath(GetParam()), {}, PipelineOptions{}, "tile");
  Lowered reused = lower(c.tileIR, true), fresh = lower(c.tileIR, false);
  EXPECT_EQ(fresh.stats.reused, 0);
  EXPECT_EQ(fresh.stats.lowered, static_cast<int>(c.tileIR.loop.kernels.size()));
  EXPECT_EQ(reused.stats.lowered + reused.stats.reused, fresh.stats.lowered);
  EXPECT_EQ(kernel::print(reused.program), kernel::print(fresh.program));
  EXPECT_EQ(cuda::print(cuda::emit(reused.program)), cuda::print(cuda::emit(fresh.program)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KernelReuse,
                         ::testing::Values("llama_tiny", "hf_llama_tiny", "hf_llama_tiny_bf16", "mlp", "attention",
                                           "shapes", "reductions"));

TEST(KernelReuseStats, TheSecondDecoderLayerIsCopiedNotLowered) {
  for (const char* model : {"llama_tiny", "hf_llama_tiny"}) {
    Compiled c = compileModel(test::fixturePath(model), {}, PipelineOptions{}, "tile");
    Lowered l = lower(c.tileIR, true);
    // 2 layers of 9 kernels (attention one) + final norm + LM head. Layer 0's first RMSNorm also holds the embedding
    // gather (an index read from memory: never copied), so layer 1's is lowered; layer 1's other 8 kernels are copies,
    // and so is the final norm (the same computation as layer 1's first RMSNorm).
    EXPECT_EQ(l.program.kernels.size(), 20u) << model;
    EXPECT_EQ(l.stats.reused, 9) << model;
    EXPECT_EQ(l.stats.lowered, 11) << model;
  }
}

TEST(KernelReuseKey, BuffersOfTheSameKernelInAnotherLayerGetTheSameKey) {
  Compiled c = compileModel(test::fixturePath("llama_tiny"), {}, PipelineOptions{}, "tile");
  std::vector<int> first, second;
  // kernel 1 is layer 0's q/k/v projection, kernel 10 layer 1's (9 kernels per layer).
  std::string a = tile::reuseKey(c.tileIR, 1, first), b = tile::reuseKey(c.tileIR, 10, second);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_NE(first[i], second[i]) << "canonical buffer " << i;
  // The embedding gather reads token ids as indices: never reused.
  EXPECT_TRUE(tile::reuseKey(c.tileIR, 0, first).empty());
}

}  // namespace
}  // namespace kiln
