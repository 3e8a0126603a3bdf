#include "kiln/support/target.h"

#include <fmt/format.h>

#include "kiln/support/error.h"

namespace kiln {
namespace {

Target make(std::string arch, std::string device, int major, int minor, int64_t sms, int64_t threadsPerSm,
            int64_t maxSharedPerBlock, int64_t sharedPerSm, double bandwidth, double f32Tflops) {
  Target t;
  t.arch = std::move(arch);
  t.device = std::move(device);
  t.computeMajor = major;
  t.computeMinor = minor;
  t.smCount = sms;
  t.maxThreadsPerSm = threadsPerSm;
  t.maxSharedPerBlock = maxSharedPerBlock;
  t.sharedPerSm = sharedPerSm;
  t.memoryBandwidthGBs = bandwidth;
  t.f32FlopsPerSecond = f32Tflops * 1e12;
  t.cpAsync = t.ldmatrix = true;
  t.tma = t.clusters = t.programmaticLaunch = major >= 9;
  return t;
}

std::vector<Target> buildTargets() {
  std::vector<Target> ts;
  ts.push_back(make("sm_80", "A100-SXM4-80GB", 8, 0, 108, 2048, 163 * 1024, 164 * 1024, 2039, 19.5));
  ts.push_back(make("sm_89", "L40S", 8, 9, 142, 1536, 99 * 1024, 100 * 1024, 864, 91.6));
  // H200: 4.2 TB/s is the device-to-device copy rate and 50 TFLOP/s the f32 (no TF32) matrix-product rate measured on the
  // lent machine (REFERENCE.md); the A100 and L40S figures are their data sheets'.
  ts.push_back(make("sm_90", "H200", 9, 0, 132, 2048, 227 * 1024, 228 * 1024, 4200, 50));
  Target a = make("sm_90a", "H200", 9, 0, 132, 2048, 227 * 1024, 228 * 1024, 4200, 50);
  a.wgmma = true;  // the architecture-specific features (wgmma, setmaxnreg) exist only under sm_90a
  ts.push_back(a);
  return ts;
}

}  // namespace

const std::vector<Target>& knownTargets() {
  static const std::vector<Target> targets = buildTargets();
  return targets;
}

std::string knownArchList() {
  std::string s;
  for (const Target& t : knownTargets()) s += (s.empty() ? "" : ", ") + t.arch;
  return s;
}

const Target& targetFor(const std::string& arch) {
  for (const Target& t : knownTargets())
    if (t.arch == arch) return t;
  userError("--arch: kiln has no target '{}'; use one of {}", arch, knownArchList());
}

const Target& defaultTarget() { return targetFor("sm_90a"); }

}  // namespace kiln
