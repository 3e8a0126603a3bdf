// Targets (`--arch`) and the runtime's rule for which devices a cubin compiled for one runs on.
#include <gtest/gtest.h>

#include <string>

#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"
#include "kiln/support/target.h"

namespace kiln {
namespace {

TEST(Target, KnownTargetsInHelpOrder) {
  EXPECT_EQ(knownArchList(), "sm_80, sm_89, sm_90, sm_90a");
  ASSERT_EQ(knownTargets().size(), 4u);
  for (const Target& t : knownTargets()) EXPECT_EQ(&targetFor(t.arch), &t) << t.arch;
}

TEST(Target, DefaultIsSm90a) {
  const Target& t = defaultTarget();
  EXPECT_EQ(t.arch, "sm_90a");
  EXPECT_EQ(t.computeMajor, 9);
  EXPECT_EQ(t.computeMinor, 0);
  EXPECT_TRUE(t.wgmma);
  EXPECT_FALSE(targetFor("sm_90").wgmma);
  EXPECT_FALSE(targetFor("sm_80").tma);
}

TEST(Target, DefaultArchIsTheOneDefault) { EXPECT_EQ(defaultTarget().arch, kDefaultArch); }

// The rates and sizes the Tile models read, per arch: the H200's measured tensor-core rate, the data sheets' elsewhere.
TEST(Target, TensorCoreRateAndL2PerArch) {
  EXPECT_EQ(targetFor("sm_90a").tensorCoreFlopsPerSecond, 767e12);
  EXPECT_EQ(targetFor("sm_90").tensorCoreFlopsPerSecond, 767e12);
  EXPECT_EQ(targetFor("sm_80").tensorCoreFlopsPerSecond, 312e12);
  EXPECT_EQ(targetFor("sm_89").tensorCoreFlopsPerSecond, 362e12);
  EXPECT_EQ(targetFor("sm_90a").l2Bytes, 50e6);
  EXPECT_EQ(targetFor("sm_80").l2Bytes, 40e6);
  EXPECT_EQ(targetFor("sm_89").l2Bytes, 48e6);
  for (const Target& t : knownTargets()) {
    EXPECT_GT(t.productCosts.streamingSliceSeconds, 0) << t.arch;
    EXPECT_GT(t.productCosts.mmaSyncPeakFraction, 0) << t.arch;
    EXPECT_LE(t.productCosts.wgmmaPeakFraction, 1) << t.arch;
  }
}

TEST(Target, UnknownArchIsAUserErrorNamingTheKnownOnes) {
  for (std::string bad : {"sm_75", "sm_90 -o x; touch INJECTED; #", "", "SM_90A", "sm_90a "}) {
    try {
      targetFor(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UserError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("'" + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(knownArchList()), std::string::npos) << what;
    }
  }
}

// compute capability major.minor -> runs?
struct Case {
  const char* arch;
  int major, minor;
  bool runs;
};

TEST(ArchMismatch, WhichDevicesEachTargetRunsOn) {
  const Case cases[] = {
      {"sm_90a", 9, 0, true},  {"sm_90a", 9, 1, false}, {"sm_90a", 8, 9, false}, {"sm_90a", 10, 0, false},
      {"sm_90", 9, 0, true},   {"sm_90", 9, 5, true},   {"sm_90", 8, 9, false},  {"sm_90", 10, 0, false},
      {"sm_80", 8, 0, true},   {"sm_80", 8, 6, true},   {"sm_80", 8, 9, true},   {"sm_80", 9, 0, false},
      {"sm_80", 7, 5, false},  {"sm_89", 8, 9, true},   {"sm_89", 8, 6, false},  {"sm_89", 8, 0, false},
      {"sm_89", 9, 0, false},
  };
  for (const Case& c : cases)
    EXPECT_EQ(runtime::archMismatch(c.arch, c.major, c.minor).empty(), c.runs)
        << c.arch << " on " << c.major << "." << c.minor << ": " << runtime::archMismatch(c.arch, c.major, c.minor);
}

TEST(ArchMismatch, ReasonIsOneLineNamingTheFix) {
  std::string why = runtime::archMismatch("sm_90a", 8, 9);
  EXPECT_EQ(why, "sm_90a cubins run only on compute capability 9.0 (architecture-specific features), and the device "
                 "is 8.9; recompile with --arch sm_89");
  EXPECT_NE(runtime::archMismatch("sm_90", 8, 6).find("recompile with --arch sm_80"), std::string::npos);
  EXPECT_NE(runtime::archMismatch("sm_89", 8, 0).find("on compute capability 8.9 or a later 8.x"), std::string::npos);
  EXPECT_NE(runtime::archMismatch("sm_80", 9, 0).find("recompile with --arch sm_90a"), std::string::npos);
  why = runtime::archMismatch("sm_90a", 7, 5);
  EXPECT_NE(why.find("kiln has no target for it"), std::string::npos) << why;
  EXPECT_NE(why.find(knownArchList()), std::string::npos) << why;
  for (const Target& t : knownTargets())
    EXPECT_EQ(runtime::archMismatch(t.arch, t.computeMajor, t.computeMinor), "") << t.arch;
}

TEST(ArchMismatch, OtherFormsAreLeftToTheDriver) {
  for (const char* arch : {"", "compute_90", "sm_", "sm_9", "sm_90b", "sm_90a1"})
    EXPECT_EQ(runtime::archMismatch(arch, 9, 0), "") << arch;
}

}  // namespace
}  // namespace kiln
