// kernel-finish-in-last-block: small kernels run in the last block of the kernel before them
// (tests/passes/kernel/kernel-finish-in-last-block.kir shows the IR). Here: what the merged kernels compute, bit for
// bit against the kernels launched apart, on a small program and on the decoder step, and the step's launches.
#include <gtest/gtest.h>

#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/kernel/parser.h"
#include "test_support.h"

namespace kiln {
namespace {

// k1 sums what k0 wrote (a barrier between its shared stores and loads), k2 is independent and narrower, k3 too large.
const char* kTails = R"(// kiln kernel IR: tails
target sm_90a
buffer x : f32[256] input
buffer t : f32[256] output
buffer s : f32[1] output
buffer u : f32[64] output
buffer w : f32[288] output
inputs x

kernel k0_exp grid(4,1,1) block(64,1,1) shared 0 bytes
  params: out t: f32[256] (written), in x: f32[256]
  i = blockIdx.x*64 + threadIdx.x
  store t[i] = exp(load x[i])

kernel k1_sum grid(1,1,1) block(64,1,1) shared 256 bytes
  params: out s: f32[1] (written), in t: f32[256]
  shared red: f32[64]
  floats: %a
  i = threadIdx.x
  store shared red[i] = add(load t[i*4], load t[i*4 + 3])
  barrier
  if (i < 1) {
    %a = 0
    for r in 0..64 step 1 {
      %a = add(%a, load shared red[r])
    }
    store s[0] = %a
  }

kernel k2_neg grid(2,1,1) block(32,1,1) shared 0 bytes
  params: out u: f32[64] (written), in x: f32[256]
  i = blockIdx.x*32 + threadIdx.x
  store u[i] = neg(load x[i])

kernel k3_neg grid(9,1,1) block(32,1,1) shared 0 bytes
  params: out w: f32[288] (written), in t: f32[256]
  i = blockIdx.x*32 + threadIdx.x
  store w[i] = neg(load t[i mod 256])

return t, s, u, w
)";

TEST(FinishInLastBlock, TailsComputeWhatTheirLaunchesDid) {
  const kernel::Program apart = kernel::parse(kTails);
  kernel::Program merged = kernel::parse(kTails);
  ASSERT_TRUE(kernel::finishInLastBlock(merged));
  kernel::verify(merged);
  ASSERT_EQ(merged.kernels.size(), 2u);
  EXPECT_EQ(merged.kernels[0].name, "k0_exp__k1_sum__k2_neg");
  const std::vector<HostTensor> in = test::randomInputs(apart, 5);
  const std::vector<HostTensor> want = kernel::interpret(apart, in), got = kernel::interpret(merged, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) EXPECT_EQ(got[o].values, want[o].values) << "output " << o;
}

// A host of one block narrower than its tail is widened to it; one with a barrier cannot be (its barrier would wait
// for threads that skip the host's body).
TEST(FinishInLastBlock, AOneBlockHostWidensOnlyWithoutBarriers) {
  std::string text = kTails;
  text.replace(text.find("kernel k0_exp grid(4,1,1) block(64,1,1)"), 39, "kernel k0_exp grid(1,1,1) block(16,1,1)");
  text.replace(text.find("i = blockIdx.x*64 + threadIdx.x"), 31, "i = blockIdx.x*16 + threadIdx.x");
  kernel::Program p = kernel::parse(text);
  ASSERT_TRUE(kernel::finishInLastBlock(p));
  EXPECT_EQ(p.kernels[0].block[0], 64);
  EXPECT_EQ(p.kernels[0].body.front().kind, kernel::Stmt::Kind::If) << "k0's body under threadIdx.x < 16";
  std::string barrierHost = text;
  barrierHost.replace(barrierHost.find("  store t[i] = exp(load x[i])"), 29, "  store t[i] = exp(load x[i])\n  barrier");
  kernel::Program q = kernel::parse(barrierHost);
  kernel::finishInLastBlock(q);
  EXPECT_EQ(q.kernels[0].name, "k0_exp") << "k1 (64 wide) cannot run in a 16-thread host with a barrier";
}

// The tiny decoder step: the rotaries, the position counter and the cache writes in q/k/v's last block, each norm in the
// last block of the product before it; outputs bit for bit those of the launches apart.
TEST(FinishInLastBlock, TheDecoderStepsSmallKernelsRunInsideTheProducts) {
  const std::string step = test::fixturePath("hf_llama_decode_tiny");
  PipelineOptions on;  // off by default: measured slower on an H100 (docs/pipeline.md)
  on.enable = {"kernel-finish-in-last-block"};
  const Compiled merged = compileModel(step, {}, on, "kernel");
  const Compiled apart = compileModel(step, {}, {}, "kernel");
  EXPECT_LT(merged.kernelIR.kernels.size(), apart.kernelIR.kernels.size());
  int withTickets = 0;
  for (const kernel::Kernel& k : merged.kernelIR.kernels)
    withTickets += std::any_of(k.params.begin(), k.params.end(), [](const kernel::Param& p) { return p.name == "tail_counters"; });
  EXPECT_EQ(withTickets, 2 * 3) << "per layer: q/k/v, o_proj and down take tickets";
  const std::vector<HostTensor> inputs = test::randomInputs(apart.kernelIR, 3);
  std::vector<HostTensor> in = inputs;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& name = apart.kernelIR.buffers[static_cast<size_t>(apart.kernelIR.inputs[i])].name;
    if (in[i].dtype == DType::I64) std::fill(in[i].values.begin(), in[i].values.end(), name == "ids" ? 7.f : 5.f);
  }
  const std::vector<HostTensor> want = kernel::interpret(apart.kernelIR, in), got = kernel::interpret(merged.kernelIR, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) EXPECT_EQ(got[o].values, want[o].values) << "output " << o;
}

}  // namespace
}  // namespace kiln
