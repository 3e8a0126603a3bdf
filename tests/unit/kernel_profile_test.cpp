// formatKernelProfile (kiln run --bench N --profile): kernels sharing code are one row, rows by total time per
// forward, shares of the sum, the tail beyond `top` summed in one line. The GPU timing itself
// (runtime::Model::timeEachKernel) runs only on the device (scripts/device_check.sh).
#include <gtest/gtest.h>

#include "kiln/driver/kernel_profile.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

runtime::KernelInfo kernel(const std::string& name, const std::string& code, int grid, int block) {
  runtime::KernelInfo k;
  k.name = name;
  k.source = code + ".cu";
  k.cubin = code + ".cubin";
  k.entry = code;
  k.grid[0] = grid;
  k.block[0] = block;
  return k;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(KernelProfile, GroupsCopiesAndSortsByTimePerForward) {
  runtime::Manifest m;
  // Two layers: the norm and the product of layer 1 are copies of layer 0's (same cubin and entry).
  m.kernels = {kernel("k0_norm", "k0_norm", 16, 256), kernel("k1_matmul", "k1_matmul", 256, 128),
               kernel("k2_norm", "k0_norm", 16, 256), kernel("k3_matmul", "k1_matmul", 256, 128),
               kernel("k4_head", "k4_head", 64, 128)};
  std::string text = formatKernelProfile(m, {0.002, 0.040, 0.002, 0.040, 0.016}, 20);
  EXPECT_TRUE(contains(text, "20 launches back to back")) << text;
  size_t matmul = text.find("k1_matmul"), head = text.find("k4_head"), norm = text.find("k0_norm");
  ASSERT_NE(matmul, std::string::npos) << text;
  EXPECT_LT(matmul, head) << text;  // 80 us per forward before 16 before 4
  EXPECT_LT(head, norm) << text;
  EXPECT_FALSE(contains(text, "k3_matmul")) << "a copy is counted in its group, not listed: " << text;
  // matmul: 2 launches, 40 us each, 80 us per forward, 80 / 100 of the sum; grid x block and the source file.
  EXPECT_TRUE(contains(text, "k1_matmul                     2      40.00        80.0  80.0%  256 x 128          k1_matmul.cu"))
      << text;
  EXPECT_TRUE(contains(text, "sum of the kernels: 0.100 ms per forward")) << text;
}

TEST(KernelProfile, SumsTheRowsBeyondTop) {
  runtime::Manifest m;
  m.kernels = {kernel("k0_a", "k0_a", 1, 32), kernel("k1_b", "k1_b", 1, 32), kernel("k2_c", "k2_c", 1, 32)};
  std::string text = formatKernelProfile(m, {0.001, 0.003, 0.002}, 5, /*top=*/1);
  EXPECT_TRUE(contains(text, "k1_b")) << text;
  EXPECT_FALSE(contains(text, "k2_c")) << text;
  EXPECT_TRUE(contains(text, "... 2 more kernels: 3.0 us per forward (50.0%)")) << text;
}

TEST(KernelProfile, OneTimePerKernel) {
  runtime::Manifest m;
  m.kernels = {kernel("k0_a", "k0_a", 1, 32)};
  EXPECT_THROW(formatKernelProfile(m, {}, 5), InternalError);
}

}  // namespace
}  // namespace kiln
