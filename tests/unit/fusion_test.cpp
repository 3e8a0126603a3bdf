// Loop-IR fusion on real models: loop-fuse-epilogues, loop-fuse-producers, loop-fuse-rows and
// loop-eliminate-dead-buffers — what is merged, what is refused and why, and that replaying the passes by
// hand gives exactly what the pipeline (src/driver/pipeline.cpp) prints after each of them.
#include <algorithm>
#include <gtest/gtest.h>

#include "test_support.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/driver/pipeline.h"
#include "kiln/support/files.h"

namespace kiln::loop {
namespace {
using test::TempDir;
namespace fs = std::filesystem;


// Loop IR straight out of loop-lower-from-tensor (one kernel per Tensor-IR primitive, nothing fused).
Program unfused(const std::string& model) {
  Compiled c = compileModel(test::fixturePath(model), {}, PipelineOptions{}, "tensor");
  Program p = lowerFromTensor(c.tensorIR);
  verify(p);
  return p;
}

// The Loop-IR passes after loop-lower-from-tensor, in the order src/driver/pipeline.cpp runs them.
// Fusion.ReplayListsTheRegisteredLoopPasses and Fusion.ReplayMatchesThePipelineAfterEveryPass keep this
// list honest: a pass added to, removed from or reordered in the pipeline makes them fail.
struct LoopPass {
  const char* name;
  bool (*run)(Program&);
  bool onByDefault = true;  // fused() runs only these; the replay test enables the others in the pipeline too
};
const std::vector<LoopPass> kLoopPasses = {
    {"loop-mask-predicates", maskPredicates},
    {"loop-index-comparisons", indexComparisons},
    {"loop-fuse-epilogues", fuseEpilogues},
    {"loop-fuse-producers", fuseProducers},
    {"loop-fuse-rows", fuseRows},
    {"loop-reciprocal-row-divisors", reciprocalRowDivisors},
    {"loop-fuse-attention", fuseAttention},
    {"loop-fuse-norm-products", fuseNormProducts, false},
    {"loop-batch-expert-products", batchExpertProducts},
    {"loop-eliminate-dead-buffers", eliminateDeadBuffers},
};

// Every Loop-IR pass of the pipeline, by hand, verifying after each (but `skip`).
Program fused(Program p, const std::string& skip = "") {
  for (const LoopPass& pass : kLoopPasses) {
    if (pass.name == skip || !pass.onByDefault) continue;
    pass.run(p);
    verify(p);
  }
  return p;
}
Program fused(const std::string& model) { return fused(unfused(model)); }
// The row and epilogue fusions' result with attention left as three kernels (scores, softmax, P·V), as loop-fuse-attention
// finds it (f32 attention is one kernel after it too).
Program fusedBeforeAttention(const std::string& model) { return fused(unfused(model), "loop-fuse-attention"); }

bool uses(const ExprP& e, Fn fn) {
  if (!e) return false;
  if (e->kind == Expr::Kind::Apply && e->fn == fn) return true;
  for (auto& a : e->args)
    if (uses(a, fn)) return true;
  return false;
}

bool uses(const Kernel& k, Fn fn) {
  return uses(k.result, fn) || std::any_of(k.stages.begin(), k.stages.end(), [&](const auto& s) { return uses(s.value, fn); });
}

bool readsBuffer(const Kernel& k, int buffer) {
  bool found = false;
  forEachKernelRead(k, [&](int b, bool) { found = found || b == buffer; });
  return found;
}

int kernelNamed(const Program& p, const std::string& suffix) {
  for (size_t i = 0; i < p.kernels.size(); ++i)
    if (p.kernels[i].name.size() >= suffix.size() &&
        p.kernels[i].name.compare(p.kernels[i].name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return static_cast<int>(i);
  return -1;
}

int bufferNamed(const Program& p, const std::string& name) {
  for (size_t i = 0; i < p.buffers.size(); ++i)
    if (p.buffers[i].name == name) return static_cast<int>(i);
  return -1;
}

// Whether one of k's origins is the Torch op `op` ("aten::add @ file:line" holds "aten::add").
bool holds(const Kernel& k, const std::string& op) {
  return std::any_of(k.origins.begin(), k.origins.end(), [&](const std::string& o) { return o.rfind(op + " ", 0) == 0 || o == op; });
}

std::vector<ReduceFn> stageFns(const Kernel& k) {
  std::vector<ReduceFn> fns;
  for (auto& s : k.stages) fns.push_back(s.fn);
  return fns;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}


// ---- the replay is the pipeline ----

TEST(Fusion, ReplayListsTheRegisteredLoopPasses) {
  std::vector<std::string> registered, replayed;
  for (const PassInfo& p : allPasses())
    if (p.level == "loop" && p.name != "loop-lower-from-tensor") registered.push_back(p.name);
  for (const LoopPass& p : kLoopPasses) replayed.push_back(p.name);
  EXPECT_EQ(replayed, registered) << "update kLoopPasses in fusion_test.cpp to match passes.def / pipeline.cpp";
}

// The pipeline's --dump-dir text after each Loop-IR pass equals the hand replay's after the same pass. The
// dump files are numbered in the order the passes ran, so this also checks the order.
class FusionReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(FusionReplay, MatchesThePipelineAfterEveryPass) {
  const std::string model = GetParam();
  TempDir tmp;
  PipelineOptions opts;
  opts.dumpDir = tmp.path.string();
  for (const LoopPass& pass : kLoopPasses)
    if (!pass.onByDefault) opts.enable.insert(pass.name);  // the replay runs every pass
  Compiled c = compileModel(test::fixturePath(model), {}, opts, "loop");

  int index = 0;
  std::vector<std::string> dumps;  // "NN-name.txt" in pipeline order
  for (const PassInfo& p : allPasses()) {
    ++index;
    if (p.level == "torch" || p.level == "tensor" || p.level == "loop") dumps.push_back(fmt::format("{:02}-{}.txt", index, p.name));
  }
  Program p = lowerFromTensor(c.tensorIR);
  ASSERT_EQ(readFile(tmp.path / dumps[dumps.size() - kLoopPasses.size() - 1]), print(p)) << model << ": loop-lower-from-tensor";
  for (size_t i = 0; i < kLoopPasses.size(); ++i) {
    kLoopPasses[i].run(p);
    verify(p);
    fs::path dump = tmp.path / dumps[dumps.size() - kLoopPasses.size() + i];
    ASSERT_TRUE(fs::exists(dump)) << dump << " (the pipeline did not run " << kLoopPasses[i].name << " there)";
    std::string expected = readFile(dump);
    EXPECT_TRUE(print(p) == expected) << model << " after " << kLoopPasses[i].name << ":\n"
                                      << unifiedDiff(expected, print(p), "pipeline", "replay");
  }
  EXPECT_EQ(print(p), print(c.loopIR)) << model;
  // Kernels are renumbered k0, k1, ... in launch order.
  for (size_t i = 0; i < c.loopIR.kernels.size(); ++i)
    EXPECT_EQ(c.loopIR.kernels[i].name.rfind("k" + std::to_string(i) + "_", 0), 0u) << c.loopIR.kernels[i].name;
}

INSTANTIATE_TEST_SUITE_P(Fusion, FusionReplay,
                         ::testing::Values("rmsnorm", "softmax", "linear", "mlp", "attention", "hf_llama_tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- loop-fuse-producers ----

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
  int r = kernelNamed(p, "_reduce_sum");
  ASSERT_GE(r, 0);
  EXPECT_NE(fusionRefusal(p, r).find("reduction"), std::string::npos);
}

// ---- whole models after every pass ----

// RMSNorm x * rsqrt(mean(x^2) + eps) * w is one kernel: per row, the sum of squares (pow fused in) as its
// one stage, then the row's write (/64, +eps, rsqrt from the epilogue; x and the weight).
TEST(Fusion, RmsnormIsOneKernel) {
  for (const char* model : {"rmsnorm", "rmsnorm_aten"}) {
    SCOPED_TRACE(model);
    Program p = fused(model);
    ASSERT_EQ(p.kernels.size(), 1u) << print(p);
    const Kernel& k = p.kernels[0];
    EXPECT_EQ(stageFns(k), std::vector<ReduceFn>{ReduceFn::Sum}) << printKernelBody(p, k);
    EXPECT_EQ(k.stages[0].axes.size(), 1u);
    EXPECT_EQ(k.stages[0].axes[0].extent, 64);
    EXPECT_EQ(k.rowAxes, 2) << "rows are [2, 8]; the write runs over the 64 elements of each";
    EXPECT_EQ(k.parallel.size(), 3u);
    EXPECT_EQ(p.buffers[k.output].kind, Buffer::Kind::Output);
    EXPECT_TRUE(uses(k, Fn::Rsqrt)) << printKernelBody(p, k);
    EXPECT_TRUE(uses(k, Fn::Mul)) << printKernelBody(p, k);
    EXPECT_EQ(p.buffers.size(), 3u) << print(p);  // x, weight, out: nothing goes through memory
  }
  // Written out (rmsnorm.py), the kernel holds every op of the module.
  Program p = fused("rmsnorm");
  for (const char* op : {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"})
    EXPECT_TRUE(holds(p.kernels[0], op)) << op << "\n" << print(p);
  EXPECT_TRUE(uses(p.kernels[0], Fn::Pow));
}

// Softmax is one kernel whose stages are the row max and the sum of exp(x - max). loop-fuse-rows gives the
// div kernel the max twice (directly and inside the sum's stage); deduplication keeps one.
TEST(Fusion, SoftmaxIsOneKernelWithTwoStages) {
  Program p = unfused("softmax");
  EXPECT_GE(p.kernels.size(), 3u) << print(p);
  for (const LoopPass& pass : kLoopPasses) {
    if (pass.name == std::string("loop-reciprocal-row-divisors")) break;
    pass.run(p);
    verify(p);
  }
  // After loop-fuse-rows, before dead-buffer elimination: the output kernel holds exactly max then sum.
  int out = -1;
  for (size_t i = 0; i < p.kernels.size(); ++i)
    if (p.buffers[p.kernels[i].output].kind == Buffer::Kind::Output) out = static_cast<int>(i);
  ASSERT_GE(out, 0);
  EXPECT_EQ(stageFns(p.kernels[out]), (std::vector<ReduceFn>{ReduceFn::Max, ReduceFn::Sum})) << printKernelBody(p, p.kernels[out]);

  EXPECT_TRUE(eliminateDeadBuffers(p));
  verify(p);
  ASSERT_EQ(p.kernels.size(), 1u) << print(p);
  const Kernel& k = p.kernels[0];
  EXPECT_EQ(stageFns(k), (std::vector<ReduceFn>{ReduceFn::Max, ReduceFn::Sum})) << printKernelBody(p, k);
  EXPECT_EQ(k.rowAxes, 3) << printKernelBody(p, k);  // rows [2, 4, 16], 16 elements each
  for (const Reduction& s : k.stages) {
    ASSERT_EQ(s.axes.size(), 1u);
    EXPECT_EQ(s.axes[0].extent, 16);
  }
  EXPECT_TRUE(uses(k.stages[1].value, Fn::Exp)) << printKernelBody(p, k);
  EXPECT_TRUE(uses(k, Fn::Div)) << printKernelBody(p, k);
  EXPECT_EQ(p.buffers.size(), 2u) << print(p);  // x, out
  EXPECT_TRUE(holds(k, "aten::softmax"));
  // A second run of loop-fuse-rows finds nothing more to do.
  EXPECT_FALSE(fuseRows(p)) << print(p);
}

// loop-reciprocal-row-divisors: softmax's write divides by the row's sum; after the pass it multiplies by 1 / sum
// (one division a row, hoisted by the lowering), computing the same function.
TEST(Fusion, SoftmaxDividesOncePerRow) {
  Program p = fused("softmax");
  ASSERT_EQ(p.kernels.size(), 1u) << print(p);
  const Kernel& k = p.kernels[0];
  ASSERT_EQ(k.result->kind, Expr::Kind::Apply) << printKernelBody(p, k);
  EXPECT_EQ(k.result->fn, Fn::Mul) << printKernelBody(p, k);
  const ExprP& reciprocal = k.result->args[1];
  ASSERT_EQ(reciprocal->kind, Expr::Kind::Apply) << printKernelBody(p, k);
  EXPECT_EQ(reciprocal->fn, Fn::Div);
  EXPECT_EQ(reciprocal->args[0]->kind, Expr::Kind::Imm);
  EXPECT_EQ(reciprocal->args[1]->kind, Expr::Kind::Acc);
  EXPECT_EQ(reciprocal->args[1]->stage, 1);
  // The same values as without the pass, to the rounding of one multiplication.
  Program before = unfused("softmax");
  for (const LoopPass& pass : kLoopPasses)
    if (std::string(pass.name) != "loop-reciprocal-row-divisors") pass.run(before);
  const Buffer& in = p.buffers[static_cast<size_t>(p.inputs[0])];
  HostTensor x = randomTensor(in.dtype, in.shape, 7);
  auto got = interpret(p, {x}), want = interpret(before, {x});
  ASSERT_EQ(got.size(), 1u);
  Comparison c = compare(got[0], want[0]);
  EXPECT_LT(c.relL2, 1e-6);
  EXPECT_GT(c.relL2, 0.0);  // a multiplication by 1 / sum does round differently somewhere
  EXPECT_TRUE(allFinite(got[0]));
}

// RMSNorm divides by a constant count (mean = sum / 64): an immediate divisor is left as it is.
TEST(Fusion, ReciprocalRowDivisorsLeavesConstantDivisors) {
  Program p = unfused("rmsnorm");
  for (const LoopPass& pass : kLoopPasses)
    if (std::string(pass.name) != "loop-reciprocal-row-divisors") pass.run(p);
  std::string before = print(p);
  EXPECT_FALSE(reciprocalRowDivisors(p)) << before;
  EXPECT_EQ(print(p), before);
}

// SwiGLU MLP: gate and up projections are the two stages of one kernel, whose write is silu(gate) * up;
// the down projection is the second kernel.
TEST(Fusion, MlpIsTwoKernels) {
  Program p = fused("mlp");
  ASSERT_EQ(p.kernels.size(), 2u) << print(p);
  const Kernel& gateUp = p.kernels[0];
  EXPECT_EQ(stageFns(gateUp), (std::vector<ReduceFn>{ReduceFn::Sum, ReduceFn::Sum})) << printKernelBody(p, gateUp);
  EXPECT_TRUE(uses(gateUp.result, Fn::Silu)) << printKernelBody(p, gateUp);
  EXPECT_TRUE(uses(gateUp.result, Fn::Mul)) << printKernelBody(p, gateUp);
  EXPECT_TRUE(readsBuffer(gateUp, bufferNamed(p, "gate_proj.weight")));
  EXPECT_TRUE(readsBuffer(gateUp, bufferNamed(p, "up_proj.weight")));
  EXPECT_EQ(std::count_if(gateUp.origins.begin(), gateUp.origins.end(), [](auto& o) { return o.rfind("aten::linear", 0) == 0; }), 2)
      << fmt::format("{}", fmt::join(gateUp.origins, "; "));
  EXPECT_TRUE(holds(gateUp, "aten::silu"));

  const Kernel& down = p.kernels[1];
  EXPECT_EQ(stageFns(down), std::vector<ReduceFn>{ReduceFn::Sum});
  EXPECT_TRUE(readsBuffer(down, gateUp.output));
  EXPECT_TRUE(readsBuffer(down, bufferNamed(p, "down_proj.weight")));
  EXPECT_EQ(p.buffers[down.output].kind, Buffer::Kind::Output);
}

// ---- loop-fuse-epilogues ----

// Linear(64->48, bias) then Linear(48->32). loop-fuse-epilogues merges the squeeze after each keepdim
// reduction ([2,8,48,1] -> [2,8,48]); the bias add, whose broadcast bias is computed after the reduction
// in the unfused program, joins the matmul kernel once the broadcast is inlined (loop-fuse-rows, rows of
// one element). Either way the first matmul's kernel ends by adding the bias to its accumulator.
TEST(Fusion, LinearBiasIsInTheMatmulKernel) {
  Program p = unfused("linear");
  int bias = bufferNamed(p, "fc1.bias");
  ASSERT_GE(bias, 0) << print(p);
  size_t before = p.kernels.size();
  EXPECT_TRUE(fuseEpilogues(p));
  verify(p);
  EXPECT_EQ(p.kernels.size(), before - 2) << "the two squeezes are merged:\n" << print(p);
  std::vector<Shape> reduced;
  for (const Kernel& k : p.kernels)
    if (!k.stages.empty()) reduced.push_back(p.buffers[k.output].shape);
  EXPECT_EQ(reduced, (std::vector<Shape>{{2, 8, 48}, {2, 8, 32}})) << print(p);

  p = fused(std::move(p));
  ASSERT_EQ(p.kernels.size(), 2u) << print(p);
  for (const Kernel& k : p.kernels) EXPECT_EQ(stageFns(k), std::vector<ReduceFn>{ReduceFn::Sum}) << printKernelBody(p, k);
  const Kernel& fc1 = p.kernels[0];
  EXPECT_TRUE(readsBuffer(fc1, bias)) << printKernelBody(p, fc1);
  EXPECT_TRUE(readsBuffer(fc1, bufferNamed(p, "fc1.weight")));
  EXPECT_TRUE(uses(fc1.result, Fn::Add)) << printKernelBody(p, fc1);
  EXPECT_FALSE(readsBuffer(p.kernels[1], bias));
  EXPECT_TRUE(readsBuffer(p.kernels[1], fc1.output));
  EXPECT_EQ(p.buffers.size(), 6u) << print(p);  // x, fc1.bias, fc1.weight, t, fc2.weight, out
}

// In hf_llama_tiny the residual adds after o_proj and down_proj are merged into those projections by
// loop-fuse-epilogues itself (the residual stream they add was written before the projection).
TEST(Fusion, HfLlamaResidualAddsAreMergedByFuseEpilogues) {
  Program p = unfused("hf_llama_tiny");
  auto projectionsWithAdd = [&] {
    int n = 0;
    for (const Kernel& k : p.kernels) n += !k.stages.empty() && holds(k, "aten::linear") && holds(k, "aten::add") && uses(k.result, Fn::Add);
    return n;
  };
  EXPECT_EQ(projectionsWithAdd(), 0);
  EXPECT_TRUE(fuseEpilogues(p));
  verify(p);
  EXPECT_EQ(projectionsWithAdd(), 4) << "o_proj and down_proj of both layers:\n" << print(p);
}

// A reduction over [2, 8, 64] -> [2, 8, 1] (reduction variable 3) read by a consumer of higher rank,
// `x.sum(-1).view(1, 1, 2, 8) * 2` (parallel variables 0..3): the merged kernel's reduction axis must not
// reuse a variable of the consumer's axes.
TEST(Fusion, EpilogueOfHigherRankKeepsTheReductionVariableApart) {
  Program p;
  p.modelName = "sum_view_mul";
  p.buffers = {Buffer{Buffer::Kind::Input, "x", DType::F32, {2, 8, 64}, nullptr},
               Buffer{Buffer::Kind::Temp, "t1", DType::F32, {2, 8, 1}, nullptr},
               Buffer{Buffer::Kind::Output, "out0", DType::F32, {1, 1, 2, 8}, nullptr}};
  p.inputs = {0};
  p.outputs = {2};
  auto v = [](int id, const char* name) { return idxVar(id, name); };
  Kernel sum;
  sum.name = "k0_reduce_sum";
  sum.output = 1;
  sum.parallel = {{0, "p0", 2}, {1, "p1", 8}, {2, "p2", 1}};
  sum.rowAxes = 3;
  sum.stages = {Reduction{ReduceFn::Sum, {{3, "r0", 64}}, load(0, {v(0, "p0"), v(1, "p1"), v(3, "r0")})}};
  sum.result = accRef(0);
  Kernel mul;
  mul.name = "k1_mul";
  mul.output = 2;
  mul.parallel = {{0, "p0", 1}, {1, "p1", 1}, {2, "p2", 2}, {3, "p3", 8}};
  mul.result = apply(Fn::Mul, {load(1, {v(2, "p2"), v(3, "p3"), idxConst(0)}), imm(2.f)});
  p.kernels = {sum, mul};
  verify(p);

  HostTensor x = randomTensor(DType::F32, {2, 8, 64}, 7);
  HostTensor expected{DType::F32, {1, 1, 2, 8}, std::vector<float>(16)};
  for (int i = 0; i < 16; ++i) {
    double s = 0;
    for (int r = 0; r < 64; ++r) s += x.values[i * 64 + r];
    expected.values[i] = static_cast<float>(2 * s);
  }
  auto before = interpret(p, {x});
  ASSERT_EQ(before.size(), 1u);
  EXPECT_TRUE(passes(compare(before[0], expected), DType::F32)) << "the hand-written program is wrong";

  EXPECT_TRUE(fuseEpilogues(p)) << "the mul reads the sum pointwise:\n" << print(p);
  ASSERT_EQ(p.kernels.size(), 1u) << print(p);
  ASSERT_NO_THROW(verify(p)) << print(p);
  const Kernel& k = p.kernels[0];
  for (const Reduction& s : k.stages)
    for (const Axis& a : s.axes)
      for (const Axis& par : k.parallel) EXPECT_NE(a.var, par.var) << a.name << " shares its variable with " << par.name << ":\n" << print(p);
  auto after = interpret(p, {x});
  ASSERT_EQ(after.size(), 1u);
  Comparison cmp = compare(after[0], expected);
  EXPECT_TRUE(passes(cmp, DType::F32)) << "relL2 " << cmp.relL2 << "\n" << print(p);
}

// The kernels of one decoder layer of hf_llama_tiny, by their roles.
struct LlamaLayer {
  int attnNorm, qkv, qRope, kRope, scores, softmax, pv, oProj, mlpNorm, gateUp, down;
};

// Splits hf_llama_tiny's fused Loop IR into its layers: the three SDPA kernels (scores, softmax, P·V) anchor
// each layer, the other kernels are at fixed offsets from them.
std::vector<LlamaLayer> llamaLayers(const Program& p) {
  std::vector<LlamaLayer> layers;
  for (size_t i = 0; i + 2 < p.kernels.size(); ++i) {
    if (!holds(p.kernels[i], "aten::scaled_dot_product_attention") || (i > 0 && holds(p.kernels[i - 1], "aten::scaled_dot_product_attention")))
      continue;
    int s = static_cast<int>(i);
    layers.push_back({s - 4, s - 3, s - 2, s - 1, s, s + 1, s + 2, s + 3, s + 4, s + 5, s + 6});
  }
  return layers;
}

// In hf_llama_tiny every decoder layer is 11 kernels before loop-fuse-attention (q, k and v one stacked product; 9 after
// it, attention one kernel); both residual adds
// are epilogues of the projection
// before them (o_proj, down_proj), so the residual stream is written once per add.
TEST(Fusion, HfLlamaResidualAddsAreEpilogues) {
  Program p = fusedBeforeAttention("hf_llama_tiny");
  auto layers = llamaLayers(p);
  ASSERT_EQ(layers.size(), 2u) << print(p);
  EXPECT_EQ(p.kernels.size(), 2 * 11 + 2u) << "2 layers of 11 kernels, the final norm and the LM head:\n" << print(p);
  EXPECT_EQ(layers[1].attnNorm, layers[0].down + 1);
  for (const LlamaLayer& L : layers) {
    SCOPED_TRACE(fmt::format("layer at kernel {}", L.scores));
    for (int proj : {L.oProj, L.down}) {
      const Kernel& k = p.kernels[proj];
      EXPECT_TRUE(holds(k, "aten::linear")) << fmt::format("{}", fmt::join(k.origins, "; "));
      EXPECT_TRUE(holds(k, "aten::add")) << k.name << " should hold the residual add: " << fmt::format("{}", fmt::join(k.origins, "; "));
      EXPECT_EQ(stageFns(k), std::vector<ReduceFn>{ReduceFn::Sum}) << printKernelBody(p, k);
      EXPECT_TRUE(uses(k.result, Fn::Add)) << printKernelBody(p, k);
    }
    EXPECT_TRUE(readsBuffer(p.kernels[L.oProj], p.kernels[L.pv].output));
    EXPECT_TRUE(readsBuffer(p.kernels[L.down], p.kernels[L.gateUp].output));
    // The o_proj kernel's result (the residual stream) feeds the MLP's norm and the next residual add.
    EXPECT_TRUE(readsBuffer(p.kernels[L.mlpNorm], p.kernels[L.oProj].output));
    EXPECT_TRUE(readsBuffer(p.kernels[L.down], p.kernels[L.oProj].output));
    // Both RMSNorms are one kernel each (row fusion), the MLP's gate/up one two-stage kernel.
    for (int norm : {L.attnNorm, L.mlpNorm}) {
      EXPECT_TRUE(holds(p.kernels[norm], "aten::rsqrt")) << fmt::format("{}", fmt::join(p.kernels[norm].origins, "; "));
      EXPECT_EQ(p.kernels[norm].stages.size(), 1u);
    }
    EXPECT_EQ(p.kernels[L.gateUp].stages.size(), 2u) << printKernelBody(p, p.kernels[L.gateUp]);
    EXPECT_TRUE(holds(p.kernels[L.gateUp], "aten::silu"));
    // q, k and v come from one product; both rotary kernels and P·V read it.
    EXPECT_TRUE(readsBuffer(p.kernels[L.qRope], p.kernels[L.qkv].output));
    EXPECT_TRUE(readsBuffer(p.kernels[L.kRope], p.kernels[L.qkv].output));
    EXPECT_TRUE(readsBuffer(p.kernels[L.pv], p.kernels[L.qkv].output));
  }
}

// ---- loop-fuse-rows refuses a reader that does not read once per row ----

// Attention's scores matmul ends in a reduction whose result softmax reads at every element (its row is
// the whole scores row, not one value per row): loop-fuse-rows leaves it its own kernel.
TEST(Fusion, ScoresMatmulStaysItsOwnKernel) {
  for (const char* model : {"attention", "hf_llama_tiny"}) {
    SCOPED_TRACE(model);
    Program p = fusedBeforeAttention(model);
    int softmax = -1;
    for (size_t i = 0; i < p.kernels.size() && softmax < 0; ++i)
      if (stageFns(p.kernels[i]) == std::vector<ReduceFn>{ReduceFn::Max, ReduceFn::Sum}) softmax = static_cast<int>(i);
    ASSERT_GT(softmax, 0) << print(p);
    const Kernel& scores = p.kernels[softmax - 1];
    EXPECT_EQ(stageFns(scores), std::vector<ReduceFn>{ReduceFn::Sum}) << printKernelBody(p, scores);
    EXPECT_EQ(p.buffers[scores.output].kind, Buffer::Kind::Temp);
    EXPECT_TRUE(readsBuffer(p.kernels[softmax], scores.output)) << printKernelBody(p, p.kernels[softmax]);
    // The softmax kernel's first stage (the max) reads the scores: a whole row of them per row.
    bool maxReadsScores = false;
    forEachBufferRead(p.kernels[softmax].stages[0].value, [&](int b, bool) { maxReadsScores = maxReadsScores || b == scores.output; });
    EXPECT_TRUE(maxReadsScores) << printKernelBody(p, p.kernels[softmax]);
    EXPECT_NE(fusionRefusal(p, softmax - 1).find("reduction"), std::string::npos) << fusionRefusal(p, softmax - 1);
    // A further run of the fusion passes changes nothing.
    std::string once = print(p);
    EXPECT_FALSE(fuseEpilogues(p));
    EXPECT_FALSE(fuseRows(p));
    EXPECT_EQ(print(p), once);
    if (std::string(model) == "attention") {
      EXPECT_EQ(p.kernels.size(), 5u) << "q/k/v stacked, scores (with / sqrt(d)), softmax, P·V, o:\n" << print(p);
      EXPECT_TRUE(holds(scores, "aten::matmul"));
      EXPECT_TRUE(holds(scores, "aten::div")) << "the 1/sqrt(d) scale is the scores' epilogue";
      EXPECT_TRUE(holds(p.kernels[softmax], "aten::softmax"));
    }
  }
}

// ---- --explain-fusion ----

TEST(Fusion, ExplainNamesEveryKernel) {
  for (const char* model : {"mlp", "attention", "rmsnorm", "hf_llama_tiny"}) {
    SCOPED_TRACE(model);
    Compiled c = compileModel(test::fixturePath(model), {}, PipelineOptions{}, "loop");
    std::string report = explainFusion(c.loopIR);
    EXPECT_EQ(report.rfind(fmt::format("// kiln fusion report: {} ({} kernels)\n", model, c.loopIR.kernels.size()), 0), 0u) << report;
    for (const Kernel& k : c.loopIR.kernels) {
      EXPECT_NE(report.find("kernel " + k.name + " "), std::string::npos) << k.name << "\n" << report;
      for (auto& o : k.origins) EXPECT_NE(report.find("holds " + o), std::string::npos) << o;
    }
  }
  // Attention: the scores kernel is read by softmax; the report says why it was not fused.
  Compiled c = compileModel(test::fixturePath("attention"), {}, PipelineOptions{}, "loop");
  std::string report = explainFusion(c.loopIR);
  EXPECT_NE(report.find("not fused"), std::string::npos) << report;
  EXPECT_NE(report.find("reduction"), std::string::npos) << report;
}

// ---- idempotence ----

// The fusion passes reach a fixed point: a second run over the fused program changes nothing.
TEST(Fusion, SecondRunIsNoOp) {
  for (const char* model : {"mlp", "rmsnorm", "attention", "softmax", "linear"}) {
    Program p = fused(model);
    std::string once = print(p);
    for (const LoopPass& pass : kLoopPasses) EXPECT_FALSE(pass.run(p)) << model << ": " << pass.name;
    EXPECT_EQ(print(p), once) << model;
  }
}

}  // namespace
}  // namespace kiln::loop
