// DESIGN.md §4's rule for bf16/f16 checks: kiln's error against the f32 evaluation may be at most 1.5 x
// LibTorch's (in the same low precision) + 1e-3; NaN, infinities and shape mismatches never pass.
#include <gtest/gtest.h>

#include <limits>

#include "kiln/support/host_tensor.h"

namespace kiln {
namespace {

Comparison err(double relL2) {
  Comparison c;
  c.relL2 = relL2;
  return c;
}

TEST(CheckRule, KilnMayBeOneAndAHalfTimesLibTorchsErrorPlusASlack) {
  EXPECT_TRUE(passesAgainstF32(err(0.0), err(0.0)));
  EXPECT_TRUE(passesAgainstF32(err(1e-3), err(0.0)));        // the slack alone
  EXPECT_FALSE(passesAgainstF32(err(1.1e-3), err(0.0)));
  EXPECT_TRUE(passesAgainstF32(err(2.03e-2), err(2.09e-2)));  // closer to f32 than LibTorch
  EXPECT_TRUE(passesAgainstF32(err(1.6e-2), err(1.0e-2)));    // 1.5 * 1e-2 + 1e-3 = 1.6e-2
  EXPECT_FALSE(passesAgainstF32(err(1.7e-2), err(1.0e-2)));
}

TEST(CheckRule, NaNAndShapeMismatchNeverPass) {
  Comparison nan = err(1e-4);
  nan.hasNaN = true;
  EXPECT_FALSE(passesAgainstF32(nan, err(1e-2)));
  Comparison shape = err(0.0);
  shape.shapeMismatch = true;
  EXPECT_FALSE(passesAgainstF32(shape, err(1e-2)));
  EXPECT_FALSE(passesAgainstF32(err(std::numeric_limits<double>::quiet_NaN()), err(1e-2)));
  EXPECT_FALSE(passesAgainstF32(err(1e-3), err(std::numeric_limits<double>::infinity())));
}

}  // namespace
}  // namespace kiln
