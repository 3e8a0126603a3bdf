// kernel-overlap-launches: on sm_90a every kernel of a model but those that cp.async f32 operands (f32 products and
// attention: tests/passes/kernel/kernel-overlap-launches-f32-streams.kir) is a programmatic launch
// (Kernel::programmaticLaunch),
// printed in Kernel IR, emitted as griddepcontrol.wait before the body touches memory, carried by the manifest
// (format 4) to the runtime; on sm_80 none is, and the verifier refuses one there. The flag changes no result: the
// interpreter runs the kernels as it would without (the golden fixtures' interpreter tests run them with it).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "kiln/cuda/emitter.h"
#include "kiln/driver/pipeline.h"
#include "kiln/loop/ir.h"
#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"
#include "test_support.h"

namespace kiln {
namespace {

TEST(OverlapLaunches, EveryKernelOnSm90aNoneOnSm80) {
  Compiled hopper = compileModel(test::fixturePath("mlp"), {}, {}, "kernel");
  ASSERT_FALSE(hopper.kernelIR.kernels.empty());
  for (const kernel::Kernel& k : hopper.kernelIR.kernels) EXPECT_TRUE(k.programmaticLaunch) << k.name;
  EXPECT_NE(kernel::print(hopper.kernelIR).find(" programmatic-launch"), std::string::npos);

  Compiled ampere = compileModel(test::fixturePath("mlp"), {}, {}, "kernel", std::nullopt, targetFor("sm_80"));
  for (const kernel::Kernel& k : ampere.kernelIR.kernels) EXPECT_FALSE(k.programmaticLaunch) << k.name;

  PipelineOptions off;
  off.disable = {"kernel-overlap-launches"};
  Compiled without = compileModel(test::fixturePath("mlp"), {}, off, "kernel");
  for (const kernel::Kernel& k : without.kernelIR.kernels) EXPECT_FALSE(k.programmaticLaunch) << k.name;
}

// Every thread waits for the grids before it ahead of any access to a parameter (the declarations before the wait name
// none) and allows the next launch at the end. A kernel without the flag has neither statement.
TEST(OverlapLaunches, TheWaitComesBeforeAnyMemoryAccess) {
  Compiled c = compileModel(test::fixturePath("mlp_bf16_wide"), {}, {}, "cuda");
  const std::regex param(R"(\b(out|in[0-9]+|tmap[0-9]+)\b)");
  for (const cuda::Source& s : c.cudaIR.sources) {
    const size_t body = s.text.find(") {\n");
    const size_t wait = s.text.find("kiln::wait_prior_grids();");
    const size_t allow = s.text.find("kiln::launch_dependent_grids();");
    ASSERT_NE(body, std::string::npos) << s.file;
    ASSERT_NE(wait, std::string::npos) << s.file;
    ASSERT_NE(allow, std::string::npos) << s.file;
    EXPECT_LT(wait, allow) << s.file;
    // ... and lets the next kernel launch after its whole body: the statement ends the kernel.
    EXPECT_EQ(s.text.find("\n}", allow), s.text.size() - 3) << s.file;
    const std::string before = s.text.substr(body + 4, wait - body - 4);
    EXPECT_FALSE(std::regex_search(before, param)) << s.file << ":\n" << before;
  }
  PipelineOptions off;
  off.disable = {"kernel-overlap-launches"};
  Compiled without = compileModel(test::fixturePath("mlp_bf16_wide"), {}, off, "cuda");
  for (const cuda::Source& s : without.cudaIR.sources) {
    EXPECT_EQ(s.text.find("wait_prior_grids"), std::string::npos) << s.file;
    EXPECT_EQ(s.text.find("launch_dependent_grids"), std::string::npos) << s.file;
  }
}

TEST(OverlapLaunches, ResultsAreThoseOfTheLoopProgram) {
  Compiled c = compileModel(test::fixturePath("mlp_bf16_wide"), {}, {}, "kernel");
  auto inputs = test::randomInputs(c.kernelIR, 5);
  auto got = kernel::interpret(c.kernelIR, inputs);
  auto want = loop::interpret(c.loopIR, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(compare(got[i], want[i]).relL2, 1e-2) << i;
}

TEST(OverlapLaunches, VerifierRefusesItOnATargetWithout) {
  Compiled c = compileModel(test::fixturePath("mlp"), {}, {}, "kernel");
  kernel::Program p = c.kernelIR;
  p.target = targetFor("sm_80");
  try {
    kernel::verify(p);
    ADD_FAILURE() << "a programmatic launch on sm_80 was accepted";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("a programmatic launch (griddepcontrol) on sm_80, which has none"), std::string::npos) << e.what();
  }
}

// The manifest says which kernels are programmatic launches (format 4): written only where true, read back, refused
// in a manifest of an older format, when not a boolean and for kernels of an architecture without griddepcontrol.
TEST(OverlapLaunches, ManifestCarriesTheFlag) {
  Compiled c = compileModel(test::fixturePath("mlp"), {}, {}, "cuda");
  test::TempDir tmp;
  cuda::writeArtifacts(c.kernelIR, c.cudaIR, tmp.path / "a", cuda::ArtifactOptions{"sm_90a", false});
  auto j = nlohmann::json::parse(std::ifstream(tmp.path / "a" / "manifest.json"));
  ASSERT_FALSE(j["kernels"].empty());
  for (const auto& kj : j["kernels"]) EXPECT_EQ(kj.value("programmatic_launch", false), true);
  runtime::Manifest m = runtime::manifestFromJson(j, "m.json");
  for (const runtime::KernelInfo& k : m.kernels) EXPECT_TRUE(k.programmaticLaunch) << k.name;

  auto refused = [&](nlohmann::json bad, const std::string& want) {
    try {
      runtime::manifestFromJson(bad, "m.json");
      ADD_FAILURE() << "accepted: " << want;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  nlohmann::json old = j;
  old["format_version"] = 3;
  refused(old, "kernels[0].programmatic_launch in a manifest of format 3 (it came with format 4)");
  nlohmann::json notBool = j;
  notBool["kernels"][0]["programmatic_launch"] = 1;
  refused(notBool, "field 'kernels[0].programmatic_launch' must be true or false, got 1");
  nlohmann::json ampere = j;
  ampere["arch"] = "sm_80";
  refused(ampere, "a programmatic launch in a manifest for sm_80 (only kernels for sm_90 and later wait for the ones before them)");

  PipelineOptions off;
  off.disable = {"kernel-overlap-launches"};
  Compiled without = compileModel(test::fixturePath("mlp"), {}, off, "cuda");
  cuda::writeArtifacts(without.kernelIR, without.cudaIR, tmp.path / "b", cuda::ArtifactOptions{"sm_90a", false});
  auto jb = nlohmann::json::parse(std::ifstream(tmp.path / "b" / "manifest.json"));
  for (const auto& kj : jb["kernels"]) EXPECT_FALSE(kj.contains("programmatic_launch"));
}

}  // namespace
}  // namespace kiln
