// End-to-end tests over every model fixture: the Loop-IR and Kernel-IR interpreters agree with LibTorch on
// fresh random inputs, the emitted CUDA compiles with nvcc (for the Target, sm_90a; warnings are errors), --dtype casts
// (compileModel's castTo) agree with LibTorch running the cast module, and every pass in passes.def runs
// for some model.
#include <gtest/gtest.h>

#include "kiln/support/output.h"
#include "test_support.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kiln/driver/pipeline.h"
#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"
#include "kiln/support/files.h"
#include "kiln/support/host_tensor.h"

namespace kiln {
namespace {
using test::TempDir;
namespace fs = std::filesystem;

const std::vector<std::string> kModels = {"elementwise", "reductions", "rmsnorm",    "rmsnorm_aten",  "softmax",
                                          "linear",      "mlp",        "attention",  "shapes",        "llama_tiny",
                                          "hf_llama_tiny", "hf_llama_tiny_bf16", "layers", "attention_bf16", "attention_bf16_long",
                                          "hf_gpt_neox_tiny_bf16", "hf_gemma2_tiny_bf16",
                                          // the transformers families of models/hf_families.py (issue 9)
                                          "hf_gpt2_tiny", "hf_gpt_neox_tiny", "hf_phi_tiny", "hf_phi3_tiny",
                                          "hf_stablelm_tiny", "hf_falcon_tiny", "hf_qwen2_tiny", "hf_qwen3_tiny",
                                          "hf_mistral_tiny", "hf_gemma_tiny", "hf_gemma2_tiny",
                                          // issue 44: stack (GPT-J, Cohere), clamp_ (OLMo), a default use_cache trace
                                          "hf_gptj_tiny", "hf_cohere_tiny", "hf_olmo_tiny", "hf_qwen2_tiny_cache",
                                          // issue 44: mixtures of experts (batched_mm experts; _grouped: transformers'
                                          // default grouped_mm), encoders with attention-mask inputs
                                          "hf_mixtral_tiny", "hf_qwen2_moe_tiny", "hf_qwen3_moe_tiny",
                                          "hf_deepseek_v2_tiny", "hf_deepseek_v3_tiny", "hf_gpt_oss_tiny",
                                          "hf_mixtral_tiny_grouped", "hf_bert_tiny", "hf_roberta_tiny"};

// Fixtures whose kernels are all of kinds the fixtures above already have compiled by nvcc (the same families with
// the same routing ops in the other experts form; DistilBERT's BERT's): checked by the interpreters only, which keeps
// the suite's nvcc time down.
const std::vector<std::string> kInterpretedOnly = {"hf_qwen2_moe_tiny_grouped",   "hf_qwen3_moe_tiny_grouped",
                                                   "hf_deepseek_v2_tiny_grouped", "hf_deepseek_v3_tiny_grouped",
                                                   "hf_gpt_oss_tiny_grouped",     "hf_distilbert_tiny"};



bool isFloat(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The dtype whose DESIGN.md §4 tolerance a comparison uses: the lowest floating-point precision among the
// output and the model's inputs and weights (an f32 output of a bf16 model carries bf16 rounding). Integer
// inputs (token ids) do not lower it: an f32 Llama is checked at 1e-5.
DType checkDType(const kernel::Program& kp, DType out) {
  DType t = out;
  for (auto& b : kp.buffers)
    if ((b.kind == loop::Buffer::Kind::Input || b.kind == loop::Buffer::Kind::Weight) && isFloat(b.dtype) &&
        tolerance(b.dtype) > tolerance(t))
      t = b.dtype;
  return t;
}

void expectMatches(const std::vector<HostTensor>& out, const std::vector<HostTensor>& ref, const kernel::Program& kp,
                   const std::string& what) {
  ASSERT_EQ(out.size(), ref.size()) << what << ": number of outputs";
  for (size_t i = 0; i < out.size(); ++i) {
    DType t = checkDType(kp, ref[i].dtype);
    EXPECT_EQ(out[i].dtype, ref[i].dtype) << what << " output " << i;
    Comparison cmp = compare(out[i], ref[i]);
    EXPECT_TRUE(passes(cmp, t))
        << what << " output " << i << " (" << dtypeName(ref[i].dtype) << "[" << shapeString(ref[i].shape)
        << "], kiln [" << shapeString(out[i].shape) << "]): relL2 " << cmp.relL2 << " maxAbs " << cmp.maxAbs
        << (cmp.nonFiniteMismatches > 0 ? " NaN/Inf where LibTorch differs" : "") << (cmp.shapeMismatch ? " shape mismatch" : "") << "; tolerance "
        << tolerance(t) << " (" << dtypeName(t) << ")";
  }
}

class Models : public ::testing::TestWithParam<std::string> {};

void interpretersMatchLibTorch(const std::string& fixture) {
  const std::string path = test::fixturePath(fixture);
  Compiled c = compileModel(path, {}, PipelineOptions{}, "cuda");
  ASSERT_FALSE(c.kernelIR.inputs.empty());
  ASSERT_FALSE(c.kernelIR.kernels.empty());
  for (uint64_t seed : {11u, 12345u}) {
    SCOPED_TRACE(fmt::format("{} seed {}", fixture, seed));
    auto inputs = test::randomInputs(c.kernelIR, seed);
    auto ref = frontend::runReference(path, inputs, /*onGpu=*/false);
    ASSERT_FALSE(ref.empty());
    expectMatches(loop::interpret(c.loopIR, inputs), ref, c.kernelIR, "Loop IR interpreter");
    expectMatches(kernel::interpret(c.kernelIR, inputs), ref, c.kernelIR, "Kernel IR interpreter");
  }
}

TEST_P(Models, InterpretersMatchLibTorch) { interpretersMatchLibTorch(GetParam()); }

class InterpretedModels : public ::testing::TestWithParam<std::string> {};
TEST_P(InterpretedModels, InterpretersMatchLibTorch) { interpretersMatchLibTorch(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Fixtures, InterpretedModels, ::testing::ValuesIn(kInterpretedOnly),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST_P(Models, NvccCompilesEveryKernel) {
  Compiled c = compileModel(test::fixturePath(GetParam()), {}, PipelineOptions{}, "cuda");
  TempDir tmp;
  fs::path out = tmp.path / "artifacts";
  try {
    // For the Target the kernels were scheduled for (sm_90a: wgmma products assemble for it only).
    cuda::writeArtifacts(c.kernelIR, c.cudaIR, out, cuda::ArtifactOptions{c.kernelIR.target.arch, true});
  } catch (const UserError& e) {
    FAIL() << "writeArtifacts failed: " << e.what();
  }
  ASSERT_TRUE(fs::exists(out / "manifest.json"));
  EXPECT_TRUE(fs::exists(out / "weights.bin"));
  ASSERT_EQ(c.cudaIR.sources.size(), c.kernelIR.kernels.size());
  // Kernels with identical code share one cubin: every manifest kernel's cubin exists and is not empty,
  // its entry is the kernel that cubin was compiled for, and there are no more cubins than kernels.
  runtime::Manifest m = runtime::readManifest(out);
  ASSERT_EQ(m.kernels.size(), c.kernelIR.kernels.size());
  std::set<std::string> cubins, entryNames;
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    const runtime::KernelInfo& k = m.kernels[i];
    EXPECT_EQ(k.name, c.kernelIR.kernels[i].name);
    EXPECT_TRUE(fs::exists(out / (k.name + ".cu"))) << k.name;
    EXPECT_TRUE(fs::exists(out / k.cubin)) << k.name << " -> " << k.cubin;
    if (fs::exists(out / k.cubin)) {
      EXPECT_GT(fs::file_size(out / k.cubin), 0u) << k.cubin;
    }
    EXPECT_EQ(k.cubin, k.entry + ".cubin") << k.name;
    cubins.insert(k.cubin);
    entryNames.insert(k.entry);
  }
  EXPECT_LE(cubins.size(), m.kernels.size());
  EXPECT_EQ(cubins.size(), entryNames.size());
  // Each shared entry is an earlier kernel that has its own cubin.
  for (const runtime::KernelInfo& k : m.kernels) {
    auto owner = std::find_if(m.kernels.begin(), m.kernels.end(), [&](auto& o) { return o.name == k.entry; });
    ASSERT_NE(owner, m.kernels.end()) << k.name << "'s entry " << k.entry << " is no kernel";
    EXPECT_EQ(owner->entry, owner->name) << k.name;
  }
  // Only compiled kernels have a cubin on disk: no stray ones.
  int onDisk = 0;
  for (auto& e : fs::directory_iterator(out)) onDisk += e.path().extension() == ".cubin";
  EXPECT_EQ(onDisk, static_cast<int>(cubins.size()));
  // The two decoder layers of the Llamas share their kernels' code.
  if (GetParam().find("llama") != std::string::npos) {
    EXPECT_LT(cubins.size(), m.kernels.size()) << GetParam() << ": no kernel shares a cubin";
  }
  // Nothing but `out` is left in the parent, and no staging directory in `out` (see kiln/support/output.h).
  for (auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().find(".kiln-tmp-"), std::string::npos) << e.path();
  int entries = 0;
  for (auto& e : fs::directory_iterator(tmp.path)) {
    ++entries;
    EXPECT_EQ(e.path(), out);
  }
  EXPECT_EQ(entries, 1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Models, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// `--dtype`: compileModel's castTo casts the model's floating-point weights and inputs; both interpreters
// agree with LibTorch running the same module cast the same way, at the bf16/f16 tolerance (2e-2).
struct CastCase {
  std::string model;
  DType dtype;
};

void PrintTo(const CastCase& c, std::ostream* os) { *os << c.model << " --dtype " << dtypeName(c.dtype); }

class Casts : public ::testing::TestWithParam<CastCase> {};

TEST_P(Casts, InterpretersMatchLibTorchCastTheSameWay) {
  const auto& [model, dtype] = GetParam();
  const std::string path = test::fixturePath(model);
  Compiled c = compileModel(path, {}, PipelineOptions{}, "cuda", dtype);
  // The cast happened: the module's parameters ("*.weight") and its floating-point inputs are in the target
  // type (constants kiln makes itself, like SDPA's causal_mask, may stay f32).
  int weights = 0;
  for (auto& b : c.kernelIR.buffers) {
    bool param = b.kind == loop::Buffer::Kind::Weight && b.name.size() > 6 && b.name.compare(b.name.size() - 6, 6, "weight") == 0;
    if (param || (b.kind == loop::Buffer::Kind::Input && isFloat(b.dtype))) {
      EXPECT_EQ(b.dtype, dtype) << b.name;
    }
    weights += param;
  }
  EXPECT_GT(weights, 0);
  auto inputs = test::randomInputs(c.kernelIR, 21);
  auto ref = frontend::runReference(path, inputs, /*onGpu=*/false, dtype);
  ASSERT_EQ(ref.size(), c.kernelIR.outputs.size());
  auto check = [&](const std::vector<HostTensor>& out, const char* what) {
    ASSERT_EQ(out.size(), ref.size()) << what;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(ref[i].dtype, dtype) << what << " reference output " << i;
      Comparison cmp = compare(out[i], ref[i]);
      EXPECT_TRUE(passes(cmp, dtype)) << model << " --dtype " << dtypeName(dtype) << " " << what << " output " << i
                                      << ": relL2 " << cmp.relL2 << " maxAbs " << cmp.maxAbs
                                      << (cmp.nonFiniteMismatches > 0 ? " NaN/Inf where LibTorch differs" : "") << "; tolerance " << tolerance(dtype);
    }
  };
  check(loop::interpret(c.loopIR, inputs), "Loop IR interpreter");
  check(kernel::interpret(c.kernelIR, inputs), "Kernel IR interpreter");
}

INSTANTIATE_TEST_SUITE_P(Dtype, Casts,
                         ::testing::Values(CastCase{"mlp", DType::BF16}, CastCase{"mlp", DType::F16},
                                           CastCase{"llama_tiny", DType::BF16}, CastCase{"llama_tiny", DType::F16}),
                         [](const ::testing::TestParamInfo<CastCase>& info) {
                           return info.param.model + "_" + std::string(dtypeName(info.param.dtype));
                         });

// Every registered pass (those off by default enabled) runs, in registry order, for at least one model;
// --dump-dir writes one numbered file per pass ("04-tensor-compose-index-maps.txt").
TEST(Pipeline, EveryPassRunsAndIsDumped) {
  std::set<std::string> seen;
  for (const std::string& model : {std::string("mlp"), std::string("softmax")}) {
    TempDir tmp;
    PipelineOptions opts;
    opts.dumpDir = tmp.path.string();
    for (const PassInfo& p : allPasses())
      if (!p.onByDefault) opts.enable.insert(p.name);
    compileModel(test::fixturePath(model), {}, opts, "cuda");
    int index = 0;
    for (const PassInfo& p : allPasses()) {
      ++index;
      fs::path f = tmp.path / fmt::format("{:02}-{}.txt", index, p.name);
      if (fs::exists(f)) {
        seen.insert(p.name);
        EXPECT_GT(fs::file_size(f), 0u) << f;
      }
    }
    int files = 0;
    for (auto& e : fs::directory_iterator(tmp.path)) files += e.path().filename() != kMarkerFileName;
    EXPECT_EQ(files, static_cast<int>(allPasses().size())) << model << ": one dump file per pass (and the -o marker)";
  }
  for (const PassInfo& p : allPasses()) EXPECT_TRUE(seen.count(p.name)) << "pass never ran (or was not dumped): " << p.name;
  EXPECT_TRUE(seen.count("tensor-compose-index-maps"));
}

TEST(Pipeline, StopAfterThrowsWithThatPassesIR) {
  PipelineOptions opts;
  opts.stopAfter = "loop-fuse-producers";
  try {
    compileModel(test::fixturePath("mlp"), {}, opts, "cuda");
    FAIL() << "expected StopRequested";
  } catch (const StopRequested& s) {
    EXPECT_EQ(s.pass, "loop-fuse-producers");
    EXPECT_NE(s.irText.find("// kiln loop IR: mlp"), std::string::npos) << s.irText;
  }
}

}  // namespace
}  // namespace kiln
