// loop-fuse-producers and loop-eliminate-dead-buffers on real models: what is inlined, what is refused and why.
#include <algorithm>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kiln/driver/pipeline.h"

namespace kiln::loop {
namespace {
namespace fs = std::filesystem;

std::string modelPath(const std::string& name) {
  return (fs::path(KILN_SOURCE_DIR) / "models" / "fixtures" / (name + ".pt")).string();
}

// Loop IR straight out of loop-lower-from-tensor (one kernel per Tensor-IR primitive, nothing fused).
Program unfused(const std::string& model) {
  Compiled c = compileModel(modelPath(model), {}, PipelineOptions{}, "tensor");
  Program p = lowerFromTensor(c.tensorIR);
  verify(p);
  return p;
}

bool uses(const ExprP& e, Fn fn) {
  if (!e) return false;
  if (e->kind == Expr::Kind::Apply && e->fn == fn) return true;
  for (auto& a : e->args)
    if (uses(a, fn)) return true;
  return false;
}

bool uses(const Kernel& k, Fn fn) { return uses(k.result, fn) || std::any_of(k.stages.begin(), k.stages.end(), [&](const auto& s) { return uses(s.value, fn); }); }

bool readsBuffer(const Kernel& k, int buffer) {
  bool found = false;
  auto f = [&](const Expr& l) { found = found || l.buffer == buffer; };
  forEachLoad(k.result, f);
  for (auto& s : k.stages) forEachLoad(s.value, f);
  return found;
}

int kernelNamed(const Program& p, const std::string& suffix) {
  for (size_t i = 0; i < p.kernels.size(); ++i)
    if (p.kernels[i].name.size() >= suffix.size() &&
        p.kernels[i].name.compare(p.kernels[i].name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return static_cast<int>(i);
  return -1;
}

TEST(Fusion, MlpSiluIsInlinedIntoTheMul) {
  Program p = unfused("mlp");
  int silu = kernelNamed(p, "_silu");
  ASSERT_GE(silu, 0) << print(p);
  EXPECT_EQ(fusionRefusal(p, silu), "") << "silu should be inlinable";

  // Reduction producers stay: the matmul's reduce_sum kernels are materialised.
  int reduce = kernelNamed(p, "_reduce_sum");
  ASSERT_GE(reduce, 0);
  EXPECT_NE(fusionRefusal(p, reduce).find("reduction"), std::string::npos) << fusionRefusal(p, reduce);
  // The model output's kernel is never inlined.
  int last = static_cast<int>(p.kernels.size()) - 1;
  EXPECT_NE(fusionRefusal(p, last).find("output"), std::string::npos) << fusionRefusal(p, last);

  size_t before = p.kernels.size();
  EXPECT_TRUE(fuseProducers(p));
  verify(p);
  EXPECT_TRUE(eliminateDeadBuffers(p));
  verify(p);
  EXPECT_LT(p.kernels.size(), before);

  // No kernel computes only silu: the silu lives in the mul kernel, which reads the two matmul results.
  EXPECT_EQ(kernelNamed(p, "_silu"), -1) << print(p);
  int withSilu = 0;
  for (const Kernel& k : p.kernels) {
    if (!uses(k, Fn::Silu)) continue;
    ++withSilu;
    EXPECT_TRUE(uses(k, Fn::Mul)) << printKernelBody(p, k);
    EXPECT_TRUE(k.stages.empty()) << printKernelBody(p, k);
  }
  EXPECT_EQ(withSilu, 1) << print(p);
  // Each remaining kernel's buffer is read by a later kernel or is an output.
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    int out = p.kernels[i].output;
    bool read = p.buffers[out].kind == Buffer::Kind::Output;
    for (size_t j = i + 1; j < p.kernels.size(); ++j) read = read || readsBuffer(p.kernels[j], out);
    EXPECT_TRUE(read) << p.kernels[i].name << " is dead";
  }
  // And the reduction kernels still end in a reduction, so their refusal reason is still "reduction".
  int r = kernelNamed(p, "_reduce_sum");
  ASSERT_GE(r, 0);
  EXPECT_NE(fusionRefusal(p, r).find("reduction"), std::string::npos);
}

TEST(Fusion, MlpMatchesThePipeline) {
  Program p = unfused("mlp");
  fuseProducers(p);
  eliminateDeadBuffers(p);
  Compiled c = compileModel(modelPath("mlp"), {}, PipelineOptions{}, "loop");
  EXPECT_EQ(print(p), print(c.loopIR));
  // Kernels are renumbered k0, k1, ... in launch order.
  for (size_t i = 0; i < c.loopIR.kernels.size(); ++i)
    EXPECT_EQ(c.loopIR.kernels[i].name.rfind("k" + std::to_string(i) + "_", 0), 0u) << c.loopIR.kernels[i].name;
}

// RMSNorm: x * rsqrt(mean(x^2) + eps) * w. Today it is three kernels: the sum-of-squares reduction (pow
// fused in), the per-row rsqrt(sum/64 + eps) (not inlined into the normalize kernel, which would recompute it
// 64x, beyond the 8x work-growth bound), and the normalize kernel that multiplies by x and the weight.
// Folding the rsqrt into the reduction's epilogue would make it two.
TEST(Fusion, RmsnormKernels) {
  Program p = unfused("rmsnorm");
  fuseProducers(p);
  eliminateDeadBuffers(p);
  verify(p);
  ASSERT_EQ(p.kernels.size(), 3u) << print(p);
  const Kernel& reduce = p.kernels[0];
  ASSERT_FALSE(reduce.stages.empty()) << print(p);
  EXPECT_EQ(reduce.stages[0].fn, ReduceFn::Sum);
  EXPECT_TRUE(uses(reduce, Fn::Pow)) << printKernelBody(p, reduce);

  const Kernel& rsqrt = p.kernels[1];
  EXPECT_TRUE(rsqrt.stages.empty());
  EXPECT_TRUE(uses(rsqrt, Fn::Rsqrt)) << printKernelBody(p, rsqrt);
  EXPECT_NE(fusionRefusal(p, 1).find("repeat its work"), std::string::npos) << fusionRefusal(p, 1);

  const Kernel& normalize = p.kernels[2];
  EXPECT_EQ(p.buffers[normalize.output].kind, Buffer::Kind::Output);
  EXPECT_TRUE(normalize.stages.empty());
  EXPECT_TRUE(uses(normalize, Fn::Mul));
  EXPECT_FALSE(uses(normalize, Fn::Rsqrt)) << printKernelBody(p, normalize);
  EXPECT_TRUE(readsBuffer(normalize, rsqrt.output));
  EXPECT_EQ(p.buffers.size(), 5u) << print(p);  // x, sum, rsqrt, weight, out
}

// Fusion is idempotent: a second run over the fused program changes nothing.
TEST(Fusion, SecondRunIsNoOp) {
  for (const char* model : {"mlp", "rmsnorm", "attention", "softmax"}) {
    Program p = unfused(model);
    fuseProducers(p);
    eliminateDeadBuffers(p);
    std::string once = print(p);
    fuseProducers(p);
    EXPECT_FALSE(eliminateDeadBuffers(p)) << model;
    EXPECT_EQ(print(p), once) << model;
  }
}

}  // namespace
}  // namespace kiln::loop
