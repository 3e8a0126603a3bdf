// kernel-launch-only-changes: a cache write at a run-time position launches only the threads of the position's row
// (tests/passes/kernel/kernel-launch-only-changes.kir shows the IR). Here: what the narrowed kernel computes, at every
// position in the cache and outside it (where the write changes nothing), against the kernel before both passes.
#include <gtest/gtest.h>

#include "kiln/kernel/lower.h"
#include "kiln/kernel/parser.h"

namespace kiln {
namespace {

// index_copy of t's 2 x 16 new values at position pos of a cache of 2 x 32 x 16, written in place, 4 elements a thread.
const char* kCacheWrite = R"(// kiln kernel IR: cache_write
target sm_90a
buffer t : f32[32] input
buffer cache : f32[1x2x32x16] input
buffer pos : i64[1] input
buffer out : f32[1x2x32x16] output
inputs t, cache, pos
in_place out, cache

kernel k0_where grid(4,1,1) block(64,1,1) shared 0 bytes
  params: out out: f32[1024] (written), in t: f32[32], in cache: f32[1024], in pos: i64[1]
  floats: %v0, %v1, %v2, %v3, %v4, %v5, %v6, %v7, %v8, %v9, %v10, %v11, %v12, %v13
  block = blockIdx.x
  i0 = block*64 + threadIdx.x
  p1 = i0 floordiv 128
  p2 = (i0 floordiv 4) mod 32
  q = i0 mod 4
  %v0, %v1, %v2, %v3 = load4 t[q*4 + p1*16]
  %v4, %v5, %v6, %v7 = load4 cache[q*4 + p2*16 + p1*512]
  %v8 = select(p2 < pos[0] + 1, 1, 0)
  %v9 = select(p2 < pos[0], 0, %v8)
  %v10 = where(%v9, %v0, %v4)
  %v11 = where(%v9, %v1, %v5)
  %v12 = where(%v9, %v2, %v6)
  %v13 = where(%v9, %v3, %v7)
  store4 out[q*4 + p2*16 + p1*512] = (%v10, %v11, %v12, %v13)

return out
)";

std::vector<HostTensor> inputsAt(int64_t position) {
  HostTensor t{DType::F32, {32}, {}}, cache{DType::F32, {1, 2, 32, 16}, {}};
  for (int i = 0; i < 32; ++i) t.values.push_back(1000.f + static_cast<float>(i));
  for (int i = 0; i < 1024; ++i) cache.values.push_back(static_cast<float>(i));
  return {t, cache, HostTensor{DType::I64, {1}, {static_cast<float>(position)}}};
}

TEST(LaunchOnlyChanges, TheCacheWriteIsOneBlockAndWritesTheSameAtEveryPosition) {
  const kernel::Program before = kernel::parse(kCacheWrite);
  kernel::Program after = kernel::parse(kCacheWrite);
  ASSERT_TRUE(kernel::storeOnlyChanges(after));
  ASSERT_TRUE(kernel::launchOnlyChanges(after));
  kernel::verify(after);
  EXPECT_EQ(after.kernels[0].grid[0], 1) << "2 x 4 vectors of 4: 8 threads of one block";
  EXPECT_EQ(after.kernels[0].block[0], 32) << "one warp holds the 8 threads";
  for (int64_t position : {0, 1, 17, 31, 32, 40, -1, -33}) {
    const std::vector<HostTensor> in = inputsAt(position);
    EXPECT_EQ(kernel::interpret(after, in)[0].values, kernel::interpret(before, in)[0].values) << "position " << position;
  }
  EXPECT_EQ(kernel::interpret(after, inputsAt(40))[0].values, inputsAt(40)[1].values) << "outside the cache: unchanged";
}

// The stores are guarded by pos <= p2 alone (every row from the position on, not one): the grid stays the cache's.
TEST(LaunchOnlyChanges, AComparisonThatPinsNoRowLeavesTheGrid) {
  std::string text = kCacheWrite;
  const std::string pin = "%v9 = select(p2 < pos[0], 0, %v8)";
  text.replace(text.find(pin), pin.size(), "%v9 = select(p2 < pos[0], 0, 1)");
  kernel::Program p = kernel::parse(text);
  ASSERT_TRUE(kernel::storeOnlyChanges(p));
  EXPECT_FALSE(kernel::launchOnlyChanges(p));
  EXPECT_EQ(p.kernels[0].grid[0], 4);
}

}  // namespace
}  // namespace kiln
