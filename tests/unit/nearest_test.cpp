// Naming what a mistyped name was meant to be (kiln/support/nearest.h): the command and pass suggestions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/support/nearest.h"

namespace kiln {
namespace {

TEST(NearestNames, TheNearestFirstTiesInTheCandidatesOrder) {
  EXPECT_EQ(editDistance("compil", "compile"), 1u);
  EXPECT_EQ(editDistance("", "run"), 3u);
  EXPECT_EQ(nearestNames("tile-unrol-rings", {"tile-deepen-rings", "tile-unroll-rings", "kernel-merge-launches"}, 2),
            (std::vector<std::string>{"tile-unroll-rings", "tile-deepen-rings"}));
  EXPECT_EQ(nearestNames("ab", {"xy", "ab", "zw"}, 5), (std::vector<std::string>{"ab", "xy", "zw"}));
  EXPECT_TRUE(nearestNames("x", {}, 3).empty());
}

}  // namespace
}  // namespace kiln
