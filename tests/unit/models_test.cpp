// End-to-end tests over every model fixture: the Loop-IR and Kernel-IR interpreters agree with LibTorch on
// fresh random inputs, the emitted CUDA compiles with nvcc (sm_90, warnings are errors), and every pass in
// passes.def runs for some model.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kiln/driver/pipeline.h"
#include "kiln/support/error.h"
#include "kiln/support/files.h"
#include "kiln/support/host_tensor.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

const std::vector<std::string> kModels = {"elementwise", "reductions", "rmsnorm", "rmsnorm_aten", "softmax",
                                          "linear",      "mlp",        "attention", "shapes"};

std::string modelPath(const std::string& name) {
  return (fs::path(KILN_SOURCE_DIR) / "models" / "fixtures" / (name + ".pt")).string();
}

// A fresh, empty directory under the system temp dir, removed when the test ends.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / fmt::format("kiln-models-test-{}-{}", ::getpid(), rd());
    fs::create_directories(path);
  }
  ~TempDir() {
    removeTree(path.string());  // not fs::remove_all: see kiln/support/files.h
  }
};

std::vector<HostTensor> randomInputs(const kernel::Program& kp, uint64_t seed) {
  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < kp.inputs.size(); ++i) {
    const loop::Buffer& b = kp.buffers[kp.inputs[i]];
    inputs.push_back(randomTensor(b.dtype, b.shape, seed * 1000 + i));
  }
  return inputs;
}

void expectMatches(const std::vector<HostTensor>& out, const std::vector<HostTensor>& ref, const std::string& what) {
  ASSERT_EQ(out.size(), ref.size()) << what << ": number of outputs";
  for (size_t i = 0; i < out.size(); ++i) {
    Comparison cmp = compare(out[i], ref[i]);
    EXPECT_TRUE(passes(cmp, ref[i].dtype))
        << what << " output " << i << " (" << dtypeName(ref[i].dtype) << "[" << shapeString(ref[i].shape)
        << "], kiln [" << shapeString(out[i].shape) << "]): relL2 " << cmp.relL2 << " maxAbs " << cmp.maxAbs
        << (cmp.hasNaN ? " NaN/Inf" : "") << (cmp.shapeMismatch ? " shape mismatch" : "") << "; tolerance "
        << tolerance(ref[i].dtype);
  }
}

class Models : public ::testing::TestWithParam<std::string> {};

TEST_P(Models, InterpretersMatchLibTorch) {
  const std::string path = modelPath(GetParam());
  Compiled c = compileModel(path, {}, PipelineOptions{}, "cuda");
  ASSERT_FALSE(c.kernelIR.inputs.empty());
  ASSERT_FALSE(c.kernelIR.kernels.empty());
  for (uint64_t seed : {11u, 12345u}) {
    SCOPED_TRACE(fmt::format("{} seed {}", GetParam(), seed));
    auto inputs = randomInputs(c.kernelIR, seed);
    auto ref = frontend::runReference(path, inputs, /*onGpu=*/false);
    ASSERT_FALSE(ref.empty());
    expectMatches(loop::interpret(c.loopIR, inputs), ref, "Loop IR interpreter");
    expectMatches(kernel::interpret(c.kernelIR, inputs), ref, "Kernel IR interpreter");
  }
}

TEST_P(Models, NvccCompilesEveryKernel) {
  Compiled c = compileModel(modelPath(GetParam()), {}, PipelineOptions{}, "cuda");
  TempDir tmp;
  fs::path out = tmp.path / "artifacts";
  try {
    cuda::writeArtifacts(c.kernelIR, c.cudaIR, out, cuda::ArtifactOptions{"sm_90", true});
  } catch (const UserError& e) {
    FAIL() << "writeArtifacts failed: " << e.what();
  }
  EXPECT_TRUE(fs::exists(out / "manifest.json"));
  EXPECT_TRUE(fs::exists(out / "weights.bin"));
  ASSERT_EQ(c.cudaIR.sources.size(), c.kernelIR.kernels.size());
  for (const kernel::Kernel& k : c.kernelIR.kernels) {
    EXPECT_TRUE(fs::exists(out / (k.name + ".cu"))) << k.name;
    EXPECT_TRUE(fs::exists(out / (k.name + ".cubin"))) << k.name;
    if (fs::exists(out / (k.name + ".cubin"))) {
      EXPECT_GT(fs::file_size(out / (k.name + ".cubin")), 0u) << k.name;
    }
  }
  // Nothing but `out` is left in the parent (the temporary build directory was renamed into place).
  int entries = 0;
  for (auto& e : fs::directory_iterator(tmp.path)) {
    ++entries;
    EXPECT_EQ(e.path(), out);
  }
  EXPECT_EQ(entries, 1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Models, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Every registered pass runs, in registry order, for at least one model; --dump-dir writes one numbered file
// per pass ("04-tensor-compose-index-maps.txt").
TEST(Pipeline, EveryPassRunsAndIsDumped) {
  std::set<std::string> seen;
  for (const std::string& model : {std::string("mlp"), std::string("softmax")}) {
    TempDir tmp;
    PipelineOptions opts;
    opts.dumpDir = tmp.path.string();
    compileModel(modelPath(model), {}, opts, "cuda");
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
    for ([[maybe_unused]] auto& e : fs::directory_iterator(tmp.path)) ++files;
    EXPECT_EQ(files, static_cast<int>(allPasses().size())) << model << ": one dump file per pass";
  }
  for (const PassInfo& p : allPasses()) EXPECT_TRUE(seen.count(p.name)) << "pass never ran (or was not dumped): " << p.name;
  EXPECT_TRUE(seen.count("tensor-compose-index-maps"));
}

TEST(Pipeline, StopAfterThrowsWithThatPassesIR) {
  PipelineOptions opts;
  opts.stopAfter = "loop-fuse-producers";
  try {
    compileModel(modelPath("mlp"), {}, opts, "cuda");
    FAIL() << "expected StopRequested";
  } catch (const StopRequested& s) {
    EXPECT_EQ(s.pass, "loop-fuse-producers");
    EXPECT_NE(s.irText.find("// kiln loop IR: mlp"), std::string::npos) << s.irText;
  }
}

}  // namespace
}  // namespace kiln
