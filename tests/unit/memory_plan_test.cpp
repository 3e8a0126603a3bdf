// cuda::planMemory: temporaries whose lives (the kernels from the first that binds them to the last) do not overlap
// share arena bytes; nothing else shares any. Checked on the fixtures as compiled, and through the manifest the
// plan writes (runtime::validate accepts it).
#include <gtest/gtest.h>

#include "cli_support.h"
#include "kiln/cuda/emitter.h"
#include "kiln/cuda/memory_plan.h"
#include "kiln/driver/pipeline.h"
#include "kiln/runtime/manifest.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;

bool sameBytes(const cuda::MemoryPlan& m, const kernel::Program& p, size_t a, size_t b) {
  const int64_t aEnd = m.offsets[a] + numel(p.buffers[a].shape) * dtypeBytes(p.buffers[a].dtype);
  const int64_t bEnd = m.offsets[b] + numel(p.buffers[b].shape) * dtypeBytes(p.buffers[b].dtype);
  return m.offsets[a] < bEnd && m.offsets[b] < aEnd;
}

class MemoryPlanOf : public ::testing::TestWithParam<std::string> {};

TEST_P(MemoryPlanOf, OnlyTemporariesLivingApartShareBytes) {
  const Compiled c = compileModel(test::fixturePath(GetParam()), {}, {}, "kernel");
  const kernel::Program& p = c.kernelIR;
  const cuda::MemoryPlan m = cuda::planMemory(p);
  for (size_t a = 0; a < p.buffers.size(); ++a) {
    EXPECT_EQ(m.offsets[a] % runtime::kArenaAlignment, 0) << p.buffers[a].name;
    for (size_t b = a + 1; b < p.buffers.size(); ++b) {
      if (!sameBytes(m, p, a, b) || numel(p.buffers[a].shape) == 0 || numel(p.buffers[b].shape) == 0) continue;
      const bool temps = p.buffers[a].kind == loop::Buffer::Kind::Temp && p.buffers[b].kind == loop::Buffer::Kind::Temp;
      const bool inPlace = m.inPlaceOf[b] == static_cast<int64_t>(a) || m.inPlaceOf[a] == static_cast<int64_t>(b);
      ASSERT_TRUE(temps || inPlace) << p.buffers[a].name << " and " << p.buffers[b].name << " share bytes";
      if (temps) {
        const auto [aFirst, aLast] = m.lifetimes[a];
        const auto [bFirst, bLast] = m.lifetimes[b];
        EXPECT_TRUE(aLast < bFirst || bLast < aFirst)
            << p.buffers[a].name << " (kernels " << aFirst << ".." << aLast << ") and " << p.buffers[b].name << " (kernels "
            << bFirst << ".." << bLast << ") share bytes while both alive";
      }
    }
  }
  EXPECT_LE(m.temporaryBytes, m.unsharedTemporaryBytes);
  EXPECT_EQ(m.arenaBytes, std::max<int64_t>(m.fixedBytes + m.temporaryBytes, runtime::kArenaAlignment));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MemoryPlanOf,
                         ::testing::Values("mlp", "llama_tiny", "hf_llama_tiny", "hf_gpt2_tiny", "attention", "hf_llama_decode_tiny"));

// A decoder layer's temporaries live a few kernels each: the tiny Llama's take a quarter of the bytes they would apart,
// and the manifest written from the plan validates (its overlap check allows temporaries only).
TEST(MemoryPlan, ALlamasTemporariesShareMostOfTheirBytes) {
  const Compiled c = compileModel(test::fixturePath("llama_tiny"), {}, {}, "cuda");
  const cuda::MemoryPlan m = cuda::planMemory(c.kernelIR);
  EXPECT_LE(m.temporaryBytes * 3, m.unsharedTemporaryBytes) << m.temporaryBytes << " of " << m.unsharedTemporaryBytes;
  test::TempDir dir;
  cuda::writeArtifacts(c.kernelIR, c.cudaIR, dir.path / "out", cuda::ArtifactOptions{"sm_90a", false});
  const runtime::Manifest manifest = runtime::readManifest(dir.path / "out");  // validated
  EXPECT_EQ(manifest.arenaBytes, m.arenaBytes);
}

TEST(MemoryPlan, ExplainMemoryPrintsThePlan) {
  Result r = kiln({"compile", "models/fixtures/llama_tiny.pt", "--explain-memory"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "memory plan of llama_tiny: arena ")) << describe(r);
  EXPECT_TRUE(contains(r.out, "at run time: each session allocates ")) << describe(r);
  EXPECT_TRUE(contains(r.out, "of temporaries (")) << describe(r);
  EXPECT_TRUE(contains(r.out, " bytes at +0 ")) << describe(r);
  expectOneLineError(kiln({"compile", "models/fixtures/llama_tiny.pt", "--explain-memory", "--ir", "tile"}), 2,
                     {"each choose what kiln compile writes"});
}

}  // namespace
}  // namespace kiln
