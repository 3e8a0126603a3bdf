#include "kiln/support/target.h"

#include <fmt/format.h>

#include "kiln/support/error.h"

namespace kiln {
namespace {

// Fitted to the H200 (bench/results/, the files each line names); the only device kiln's products were measured on.
ProductCostModel h200ProductCosts() {
  ProductCostModel m;
  // Estimates of tile-shape-products' first model, checked against its H200 sweep of mma.sync and then wgmma tiles
  // (2026-12-01-h200-products-3318383.md, 2026-12-02-h200-products-ab5d1f7.md).
  m.mmaSyncPeakFraction = 0.5;
  m.wgmmaPeakFraction = 0.7;
  m.splitKernelMicros = 2.0;
  // A producer warp made compute-bound products alone on their SMs 3-6 % faster: Qwen2.5-7B gate_proj at 512 tokens,
  // 256 x 96 129.2 us against 133.5 for 128 x 144 (2026-12-04-h200-gate-s512-e92860f.md).
  m.specializedFraction = 0.95;
  // A sweep of compute-bound tiles (2026-12-03-h200-shape-sweep-a8a9173.txt).
  m.wgmmaSliceSeconds = 0.05e-6;
  // A least-squares fit on log time to 90 measured tiles and splits of nine memory-bound products (the sweeps
  // 2026-12-03-h200-shape-sweep-a8a9173.txt and -931763e.txt, the suite's rows 2026-12-03-h200-products-bf16-b0f888e.md
  // and -241a30f.md; rms error 7 %).
  m.streamingSliceSeconds = 0.21e-6;
  m.streamingSmBytesPerSecond = 197e9;
  m.streamingBandwidthFraction = 0.96;
  m.streamingSplitMicros = 1.0;
  m.streamingPartialsBytesPerSecond = 6.9e12;
  return m;
}

Target make(std::string arch, std::string device, int major, int minor, int64_t sms, int64_t threadsPerSm,
            int64_t maxSharedPerBlock, int64_t sharedPerSm, double bandwidth, double f32Tflops, double tensorTflops,
            double l2Bytes) {
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
  t.tensorCoreFlopsPerSecond = tensorTflops * 1e12;
  t.l2Bytes = l2Bytes;
  t.productCosts = h200ProductCosts();
  t.cpAsync = t.ldmatrix = true;
  t.tma = t.clusters = t.programmaticLaunch = major >= 9;
  return t;
}

std::vector<Target> buildTargets() {
  std::vector<Target> ts;
  // Data sheets: A100 dense bf16 312 TFLOP/s, L2 40 MB; L40S dense bf16 362 TFLOP/s; its L2 is the AD102's as the L40S
  // configures it, 48 MB (the data sheet lists none).
  ts.push_back(make("sm_80", "A100-SXM4-80GB", 8, 0, 108, 2048, 163 * 1024, 164 * 1024, 2039, 19.5, 312, 40e6));
  ts.push_back(make("sm_89", "L40S", 8, 9, 142, 1536, 99 * 1024, 100 * 1024, 864, 91.6, 362, 48e6));
  // H200: 4.2 TB/s is the device-to-device copy rate, 50 TFLOP/s the f32 (no TF32) and 767 TFLOP/s the bf16 matrix-product
  // rate measured on the lent machine (bench/README.md's floors); L2 the data sheet's 50 MB.
  ts.push_back(make("sm_90", "H200", 9, 0, 132, 2048, 227 * 1024, 228 * 1024, 4200, 50, 767, 50e6));
  Target a = make("sm_90a", "H200", 9, 0, 132, 2048, 227 * 1024, 228 * 1024, 4200, 50, 767, 50e6);
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

const Target& defaultTarget() { return targetFor(kDefaultArch); }

}  // namespace kiln
