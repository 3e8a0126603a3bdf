// tile-pack-attention-pairs and Kernel IR groups: causal tensor-core flash attention with more query blocks than SMs (at
// most twice as many) runs one thread block per SM of two groups, each a block of the kernel's body with its own shared
// memory and barrier. The rule, the deal (every query block once; the heaviest alone), the interpreter against the Loop
// IR, the emitted CUDA and manifest, and the verifiers' refusals.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "attention_support.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/lower.h"
#include "kiln/loop/attention.h"
#include "kiln/support/error.h"
#include "kiln/tile/layout.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace attention_test;  // NOLINT(google-build-using-namespace): the attention tests' shared helpers

Compiled compiledFor(const char* model, int64_t sms, const std::string& level) {
  Target target = defaultTarget();
  target.smCount = sms;
  return compileModel(test::fixturePath(model), {}, PipelineOptions{}, level, std::nullopt, target);
}

int64_t queryBlocksInAll(const tile::Program& t, size_t i) {  // the grid without packing: one block per query block
  return tile::flashQueryBlocksInAll(std::get<tile::FlashAttention>(t.schedules[i]), t.loop.kernels[i]);
}

// attention_bf16_512: 8 heads x 8 query blocks of 64 = 64 blocks. Packed where the target's SMs are fewer, at least half
// as many; never on CUDA cores (f32).
TEST(PackedAttention, TheRulePacksGridsOfOneToTwoBlocksAnSm) {
  for (auto [sms, packed] : std::vector<std::pair<int64_t, int64_t>>{{132, 0}, {64, 0}, {63, 63}, {40, 40}, {32, 32}, {31, 0}}) {
    SCOPED_TRACE(fmt::format("{} SMs", sms));
    Compiled c = compiledFor("attention_bf16_512", sms, "tile");
    ASSERT_EQ(queryBlocksInAll(c.tileIR, 0), 64);
    const auto& f = std::get<tile::FlashAttention>(c.tileIR.schedules[0]);
    EXPECT_EQ(f.packedPairs, packed);
    EXPECT_EQ(f.rowsInner, packed == 0) << "the deal replaces the interleaved order";
    EXPECT_EQ(tile::print(c.tileIR).find(fmt::format("grid: {} thread blocks of two query blocks", packed)) != std::string::npos,
              packed > 0)
        << tile::print(c.tileIR);
  }
  PipelineOptions without;
  without.disable = {"tile-pack-attention-pairs"};
  Target forty = defaultTarget();
  forty.smCount = 40;
  Compiled off = compileModel(test::fixturePath("attention_bf16_512"), {}, without, "tile", std::nullopt, forty);
  EXPECT_EQ(std::get<tile::FlashAttention>(off.tileIR.schedules[0]).packedPairs, 0);
  Compiled f32 = compiledFor("attention_f32", 132, "tile");
  const int64_t n = queryBlocksInAll(f32.tileIR, 0);
  for (int64_t sms : {(n + 1) / 2, n - 1}) {
    Compiled c = compiledFor("attention_f32", sms, "tile");
    EXPECT_EQ(std::get<tile::FlashAttention>(c.tileIR.schedules[0]).packedPairs, 0) << sms << " SMs: CUDA cores";
  }
}

// Every query block once, the heaviest on a thread block of their own: on 40 SMs, 64 blocks make 24 pairs and 16 alone,
// and no SM walks more key steps than the heaviest block (8) — the interleaved grid leaves which blocks share an SM to
// the GPU.
TEST(PackedAttention, EachQueryBlockRunsOnceAndPairsBalance) {
  Compiled c = compiledFor("attention_bf16_512", 40, "kernel");
  const kernel::Kernel& k = c.kernelIR.kernels[0];
  EXPECT_EQ(k.groups, 2);
  EXPECT_EQ(k.grid[0], 80);
  EXPECT_EQ(k.block[0], 128);
  EXPECT_NE(kernel::print(c.kernelIR).find(" groups 2"), std::string::npos);
  std::vector<int> seen(64, 0);
  std::vector<int64_t> steps(40, 0);
  int idle = 0;
  for (int64_t v = 0; v < 80; ++v) {
    // The item each of the kernel's blocks takes, as its first definitions compute it.
    std::vector<int64_t> env(1 << 12, 0);
    env[kernel::kBlockIdx] = v;
    std::optional<int64_t> item;
    for (const kernel::Stmt& s : k.body) {
      if (s.kind != kernel::Stmt::Kind::DefIdx) continue;
      const auto& def = s.as<kernel::op::DefIdx>();
      env.at(static_cast<size_t>(def.var)) = evaluate(def.value, env);
      if (def.name == "item") item = env[static_cast<size_t>(def.var)];
      if (item) break;
    }
    ASSERT_TRUE(item.has_value()) << kernel::print(c.kernelIR);
    const int64_t i = *item;
    if (i == 64) {
      ++idle;
      continue;
    }
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 64);
    ++seen[static_cast<size_t>(i)];
    steps[static_cast<size_t>(v / 2)] += 8 - i / 8;  // item i: query block 7 - i div 8 walks 8 - i div 8 steps
  }
  EXPECT_EQ(idle, 16);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "item " << i;
  EXPECT_EQ(*std::max_element(steps.begin(), steps.end()), 8);
  EXPECT_EQ(*std::min_element(steps.begin(), steps.end()), 7) << "64 blocks of 8 .. 1 steps on 40 SMs: 288, 7.2 an SM";
}

// Packed on every count of thread blocks from all pairs to one pair, against the Loop IR: causal and windowed attention at
// 100 tokens (partial blocks), 200 tokens of head dim 16, 80 of head dim 128 and 512 tokens.
TEST(PackedAttention, PackedBlocksMatchTheLoopInterpreter) {
  for (const char* model : {"attention_bf16", "attention_bf16_long", "attention_bf16_deep", "attention_bf16_512"}) {
    const tile::Program t = compiled(model, "tile").tileIR;
    const int64_t n = queryBlocksInAll(t, 0);
    for (size_t i = 1; i < t.schedules.size(); ++i) ASSERT_EQ(queryBlocksInAll(t, i), n);
    std::vector<Variant> variants;
    for (int64_t sms : {(n + 1) / 2, (3 * n) / 4, n - 1}) {
      if (sms < 1 || sms >= n || 2 * sms < n) continue;
      variants.push_back({fmt::format("{} query blocks in {} thread blocks", n, sms), [=](tile::FlashAttention& f) {
                            f.rowsInner = false;
                            f.pairBlocks = false;
                            f.packedPairs = sms;
                          }});
    }
    expectVariantsMatch(model, 17, variants);
  }
}

// The CUDA: the body's indices from the group, each group's shared memory 1024-byte aligned apart, the group's barrier;
// the manifest launches the thread blocks (half the grid, twice the threads and the shared memory), and nvcc takes it.
TEST(PackedAttention, TheEmittedKernelPacksTwoGroupsAThreadBlock) {
  Compiled c = compiledFor("attention_bf16_512", 40, "cuda");
  const std::string cuda = printLevel(c, "cuda");
  EXPECT_NE(cuda.find("__launch_bounds__(256)"), std::string::npos);
  EXPECT_NE(cuda.find("const int kiln_group = threadIdx.x / 128;"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("const int kiln_block = blockIdx.x * 2 + kiln_group;"), std::string::npos);
  EXPECT_NE(cuda.find("kiln::group_barrier<128>(1 + kiln_group);"), std::string::npos);
  EXPECT_EQ(cuda.find("__syncthreads"), std::string::npos) << "a block barrier would wait for the other group";
  const size_t first = cuda.find("threadIdx.x"), second = cuda.find("threadIdx.x", first + 1);
  EXPECT_EQ(cuda.find("threadIdx.x", second + 1), std::string::npos) << "the body reads kiln_thread, not threadIdx.x";
  const kernel::Kernel& k = c.kernelIR.kernels[0];
  EXPECT_EQ(k.groupSharedBytes() % 1024, 0);
  EXPECT_GE(k.groupSharedBytes(), k.dynamicSharedBytes);
  EXPECT_NE(cuda.find(fmt::format("kiln_dynamic_shared + kiln_group * {} + ", k.groupSharedBytes())), std::string::npos);
  test::TempDir tmp;
  cuda::writeArtifacts(c.kernelIR, c.cudaIR, tmp.path / "a", cuda::ArtifactOptions{"sm_90a", true});
  auto j = nlohmann::json::parse(std::ifstream(tmp.path / "a" / "manifest.json"));
  ASSERT_EQ(j["kernels"].size(), 1u);
  EXPECT_EQ(j["kernels"][0]["grid"][0], 40);
  EXPECT_EQ(j["kernels"][0]["block"][0], 256);
  EXPECT_EQ(j["kernels"][0]["shared_bytes"], 2 * k.groupSharedBytes());
}

// Refused: a packed schedule with another grid order or not between S + 1 and 2 S query blocks; a kernel with groups
// that do not divide its grid, too many threads, a named barrier (it would be the thread block's), or 9 groups.
TEST(PackedAttention, TheVerifiersRefuseWhatGroupsCannotHold) {
  Compiled c = compiledFor("attention_bf16_512", 40, "kernel");
  for (auto change : std::vector<std::function<void(tile::FlashAttention&)>>{
           [](tile::FlashAttention& f) { f.rowsInner = true; }, [](tile::FlashAttention& f) { f.pairBlocks = true; },
           [](tile::FlashAttention& f) { f.packedPairs = 64; }, [](tile::FlashAttention& f) { f.packedPairs = 31; }}) {
    tile::Program bad = c.tileIR;
    change(std::get<tile::FlashAttention>(bad.schedules[0]));
    EXPECT_THROW(tile::verify(bad), InternalError);
  }
  EXPECT_NO_THROW(kernel::verify(c.kernelIR));
  for (auto change : std::vector<std::function<void(kernel::Kernel&)>>{
           [](kernel::Kernel& k) { k.grid[0] += 1; }, [](kernel::Kernel& k) { k.block[0] = 640; },
           [](kernel::Kernel& k) { k.groups = 9; },
           [](kernel::Kernel& k) { k.body.push_back(kernel::namedBarrier(1, 128)); }}) {
    kernel::Program bad = c.kernelIR;
    change(bad.kernels[0]);
    EXPECT_THROW(kernel::verify(bad), InternalError);
  }
}

}  // namespace
}  // namespace kiln
