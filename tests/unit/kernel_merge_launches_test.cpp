// kernel-merge-launches: independent adjacent CUDA-core kernels become one launch (tests/passes/kernel/
// kernel-merge-launches.kir shows the IR). Here: the decoder step's rotaries, counters and cache writes merge and
// compute exactly what they computed apart, and a state the memory plan updates in place counts as one buffer.
#include <gtest/gtest.h>

#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/kernel/parser.h"
#include "test_support.h"

namespace kiln {
namespace {

// ids, pos, then every state (the caches, the position counters) at random.
std::vector<HostTensor> stepInputs(const kernel::Program& p) {
  std::vector<HostTensor> inputs = test::randomInputs(p, 3);
  inputs[0] = HostTensor{DType::I64, inputs[0].shape, std::vector<float>(inputs[0].values.size(), 7.f)};
  inputs[1] = HostTensor{DType::I64, inputs[1].shape, std::vector<float>(inputs[1].values.size(), 5.f)};
  for (size_t i = 2; i < inputs.size(); ++i)
    if (inputs[i].dtype == DType::I64) std::fill(inputs[i].values.begin(), inputs[i].values.end(), 5.f);
  return inputs;
}

TEST(MergeLaunches, TheDecoderStepsSmallKernelsMergeAndComputeTheSame) {
  const std::string step = test::fixturePath("hf_llama_decode_tiny");
  const Compiled merged = compileModel(step, {}, {}, "kernel");
  PipelineOptions off;
  off.disable = {"kernel-merge-launches"};
  const Compiled apart = compileModel(step, {}, off, "kernel");
  // Per layer, q's and k's rotary with the position counter (three launches into one) and the two cache writes (two
  // into one); before the layers, the rotary tables and the first norm (three into one).
  EXPECT_EQ(merged.kernelIR.kernels.size() + 2 * 3 + 2, apart.kernelIR.kernels.size());
  int cacheWrites = 0;
  for (const kernel::Kernel& k : merged.kernelIR.kernels)
    if (k.name.find("_where__") != std::string::npos) {
      ++cacheWrites;
      EXPECT_EQ(std::count_if(k.params.begin(), k.params.end(), [](const kernel::Param& p) { return p.written; }), 2) << k.name;
    }
  EXPECT_EQ(cacheWrites, 2) << "one launch writes a layer's key and value caches";
  kernel::verify(merged.kernelIR);
  const std::vector<HostTensor> inputs = stepInputs(apart.kernelIR);
  const std::vector<HostTensor> want = kernel::interpret(apart.kernelIR, inputs);
  const std::vector<HostTensor> got = kernel::interpret(merged.kernelIR, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].values, want[i].values) << "output " << i;
}

// k0 reads the cache's current value, k1 writes its next one: apart they are independent buffers, but where the memory
// plan puts the next value on the current one's bytes (Program::inPlace) k1 would overwrite what k0 reads.
TEST(MergeLaunches, AStateWrittenInPlaceIsOneBuffer) {
  const std::string text = R"(// kiln kernel IR: state
target sm_90a
buffer cache : f32[32] input
buffer t : f32[32] output
buffer next : f32[32] output
inputs cache

kernel k0_exp grid(1,1,1) block(32,1,1) shared 0 bytes
  params: out t: f32[32] (written), in cache: f32[32]
  i = threadIdx.x
  store t[i] = exp(load cache[i])

kernel k1_neg grid(1,1,1) block(32,1,1) shared 0 bytes
  params: out next: f32[32] (written), in cache: f32[32]
  i = threadIdx.x
  store next[i] = neg(load cache[i])

return t, next
)";
  kernel::Program apart = kernel::parse(text);
  EXPECT_TRUE(kernel::mergeLaunches(apart));
  EXPECT_EQ(apart.kernels.size(), 1u);
  kernel::Program inPlace = kernel::parse(text);
  inPlace.inPlace = {{2, 0}};
  EXPECT_FALSE(kernel::mergeLaunches(inPlace));
  EXPECT_EQ(inPlace.kernels.size(), 2u);
}

}  // namespace
}  // namespace kiln
