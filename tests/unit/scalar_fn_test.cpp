// tensor::applyFn, the reference semantics of kiln's scalar functions that the interpreters use and the CUDA templates
// (templates/kiln_ops.cuh) reproduce: where PyTorch defines a result for NaN, infinities or -0, kiln gives the same
// (issue 54 found relu(NaN) = 0 where PyTorch gives NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/tensor/ir.h"

namespace kiln {
namespace {

using tensor::applyFn;
using tensor::Fn;

TEST(ScalarFn, ReluPassesNaNAndNegativeZeroThroughAsPyTorchDoes) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(applyFn(Fn::Relu, nan)));
  EXPECT_TRUE(std::signbit(applyFn(Fn::Relu, -0.f)));  // torch.relu(-0.) is -0.
  EXPECT_EQ(applyFn(Fn::Relu, -inf), 0.f);
  EXPECT_EQ(applyFn(Fn::Relu, inf), inf);
  EXPECT_EQ(applyFn(Fn::Relu, -2.5f), 0.f);
  EXPECT_EQ(applyFn(Fn::Relu, 2.5f), 2.5f);
}

TEST(ScalarFn, MaxAndMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(applyFn(Fn::Max, nan, 1.f)));
  EXPECT_TRUE(std::isnan(applyFn(Fn::Max, 1.f, nan)));
  EXPECT_TRUE(std::isnan(applyFn(Fn::Min, nan, 1.f)));
  EXPECT_TRUE(std::isnan(applyFn(Fn::Min, 1.f, nan)));
}

}  // namespace
}  // namespace kiln
