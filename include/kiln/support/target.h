// The GPU a compilation is for (DESIGN.md §1, "Target"): what Tile passes size schedules by and what the
// verifiers check them against. `--arch` names one; sm_90a (the H200) is the default. Figures are those of one
// representative device per architecture (H200 for sm_90/sm_90a, A100 for sm_80, L40S for sm_89); a device with
// another SM count runs the same kernels, sized for this one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct Target {
  std::string arch;               // nvcc's -arch value: sm_80, sm_89, sm_90, sm_90a
  std::string device;             // the device the figures below describe
  int computeMajor = 0, computeMinor = 0;
  int64_t smCount = 0;
  int64_t maxThreadsPerBlock = 1024;
  int64_t maxThreadsPerSm = 2048;
  int64_t registersPerSm = 65536;       // 32-bit registers
  int64_t maxRegistersPerThread = 255;
  int64_t staticSharedPerBlock = 48 * 1024;  // without the opt-in launch attribute
  int64_t maxSharedPerBlock = 0;             // with it (dynamic shared memory)
  int64_t sharedPerSm = 0;
  double memoryBandwidthGBs = 0;        // measured device-to-device copy rate where known, else the data sheet's
  double f32FlopsPerSecond = 0;         // f32 fused multiply-adds on CUDA cores, 2 flops each (measured where known)
  // Instructions the architecture has.
  bool cpAsync = false;   // cp.async (sm_80+)
  bool ldmatrix = false;  // ldmatrix (sm_75+)
  bool tma = false;       // cp.async.bulk.tensor + mbarrier transaction counts (sm_90+)
  bool clusters = false;  // thread-block clusters, distributed shared memory (sm_90+)
  bool programmaticLaunch = false;  // griddepcontrol: a kernel's launch overlaps the one before it (sm_90+)
  bool wgmma = false;     // wgmma.mma_async (sm_90a only)

  // Threads of one warp; the same on every NVIDIA GPU kiln targets.
  static constexpr int64_t kWarpSize = 32;
  // Bytes one thread moves with its widest load or store instruction.
  static constexpr int64_t kVectorBytes = 16;
  // Alignment of a TMA copy's shared destination: where a thread block holds several blocks' shared memory (Kernel IR
  // Kernel::groups), each share starts at a multiple of it.
  static constexpr int64_t kTmaSharedAlignment = 1024;
};

// The Targets kiln knows, in the order `--help` lists them.
const std::vector<Target>& knownTargets();
// The Target named by `arch`; a UserError naming the known ones if there is none.
const Target& targetFor(const std::string& arch);
// sm_90a: the H200.
const Target& defaultTarget();
// "sm_80, sm_89, sm_90, sm_90a"
std::string knownArchList();

}  // namespace kiln
