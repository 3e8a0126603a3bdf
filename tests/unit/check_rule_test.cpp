// DESIGN.md §4's rule for bf16/f16 checks: kiln's error against the f32 evaluation may be at most 1.5 x
// LibTorch's (in the same low precision) + 1e-3; NaN or infinities where the reference differs, and shape mismatches,
// never pass. compare(): NaN and infinities that agree in position and sign are no error (issue 54: 26 false alarms
// where kiln and LibTorch agreed exactly), and a disagreement prints as NaN, not as max_abs 0.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

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
  nan.nonFiniteMismatches = 1;
  EXPECT_FALSE(passesAgainstF32(nan, err(1e-2)));
  Comparison shape = err(0.0);
  shape.shapeMismatch = true;
  EXPECT_FALSE(passesAgainstF32(shape, err(1e-2)));
  EXPECT_FALSE(passesAgainstF32(err(std::numeric_limits<double>::quiet_NaN()), err(1e-2)));
  EXPECT_FALSE(passesAgainstF32(err(1e-3), err(std::numeric_limits<double>::infinity())));
}

HostTensor tensor(std::vector<float> v) { return HostTensor{DType::F32, {static_cast<int64_t>(v.size())}, std::move(v)}; }

TEST(CheckRule, NonFiniteValuesMustAgreeInPositionAndSign) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Comparison same = compare(tensor({1, nan, inf, -inf}), tensor({1, nan, inf, -inf}));
  EXPECT_EQ(same.nonFiniteMismatches, 0);
  EXPECT_EQ(same.relL2, 0.0);
  EXPECT_TRUE(passes(same, DType::F32));
  Comparison finiteOff = compare(tensor({1.5f, nan}), tensor({1, nan}));  // the finite values are still compared
  EXPECT_DOUBLE_EQ(finiteOff.maxAbs, 0.5);
  EXPECT_FALSE(passes(finiteOff, DType::F32));
  for (auto [o, r] : {std::pair{nan, 1.f}, std::pair{1.f, nan}, std::pair{inf, -inf}, std::pair{inf, 1.f}, std::pair{0.f, -inf}}) {
    Comparison c = compare(tensor({2, o}), tensor({2, r}));
    EXPECT_EQ(c.nonFiniteMismatches, 1) << o << " vs " << r;
    EXPECT_TRUE(std::isnan(c.relL2) && std::isnan(c.maxAbs)) << o << " vs " << r;  // printed as nan, never as 0
    EXPECT_FALSE(passes(c, DType::F32));
  }
}

}  // namespace
}  // namespace kiln
