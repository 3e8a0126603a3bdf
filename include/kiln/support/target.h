// The GPU a compilation is for (DESIGN.md §1, "Target"): what Tile passes size schedules by and what the
// verifiers check them against. `--arch` names one; sm_90a (the H200) is the default. Figures are those of one
// representative device per architecture (H200 for sm_90/sm_90a, A100 for sm_80, L40S for sm_89); a device with
// another SM count runs the same kernels, sized for this one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/support/shared_layout.h"

namespace kiln {

// The Target `--arch` names when it is not given: sm_90a, the H200.
inline constexpr char kDefaultArch[] = "sm_90a";

// What tile-shape-products' models of a tensor-core product's time count with besides the Target's rates and sizes
// (passes/tile/shape_products.cpp's header says where each term enters). The constants were fitted to, or checked
// against, products measured on one device; a Target with no measurements of its own carries the H200's.
struct ProductCostModel {
  // Fractions of Target::tensorCoreFlopsPerSecond a block reaches: mma.sync products (4 warps a block issue about
  // half of it) and wgmma products reading both operands from shared memory.
  double mmaSyncPeakFraction = 0;
  double wgmmaPeakFraction = 0;
  // mma.sync and compute-bound wgmma products split S ways: the launch and run of the kernel adding the partials.
  double splitKernelMicros = 0;
  // Compute-bound wgmma products alone on their SMs, which get a producer warp (tile-specialize-warps): the share of
  // the predicted time left.
  double specializedFraction = 0;
  // Compute-bound wgmma products: the fixed cost of each 64-deep slice a block walks.
  double wgmmaSliceSeconds = 0;
  // Streaming (memory-bound) wgmma products: per 64-deep slice a block walks besides its bytes; one SM streaming its
  // block's operands through L2; the share of the Target's bandwidth the whole product reaches reading each operand
  // once; the kernel adding a split's partials (a programmatic launch), and its rate reading them (mostly from L2)
  // and writing the output.
  double streamingSliceSeconds = 0;
  double streamingSmBytesPerSecond = 0;
  double streamingBandwidthFraction = 0;
  double streamingSplitMicros = 0;
  double streamingPartialsBytesPerSecond = 0;
};

struct Target {
  std::string arch;               // nvcc's -arch value: sm_80, sm_89, sm_90, sm_90a
  std::string device;             // the device the figures below describe
  int computeMajor = 0, computeMinor = 0;
  int64_t smCount = 0;
  int64_t maxThreadsPerBlock = 1024;
  int64_t maxThreadsPerSm = 2048;
  int64_t registersPerSm = 65536;       // 32-bit registers
  int64_t maxRegistersPerThread = 255;
  int64_t staticSharedPerBlock = kSharedWithoutOptIn;  // without the opt-in launch attribute
  int64_t maxSharedPerBlock = 0;                       // with it (dynamic shared memory)
  int64_t sharedPerSm = 0;
  double memoryBandwidthGBs = 0;        // measured device-to-device copy rate where known, else the data sheet's
  double f32FlopsPerSecond = 0;         // f32 fused multiply-adds on CUDA cores, 2 flops each (measured where known)
  double tensorCoreFlopsPerSecond = 0;  // dense bf16/f16 tensor-core products, f32 accumulation (measured where known)
  double l2Bytes = 0;                   // the L2 cache
  ProductCostModel productCosts;        // tile-shape-products' fitted constants
  // Instructions the architecture has.
  bool cpAsync = false;   // cp.async (sm_80+)
  bool ldmatrix = false;  // ldmatrix (sm_75+)
  bool tma = false;       // cp.async.bulk.tensor + mbarrier transaction counts (sm_90+)
  bool clusters = false;  // thread-block clusters, distributed shared memory (sm_90+)
  bool programmaticLaunch = false;  // griddepcontrol: a kernel's launch overlaps the one before it (sm_90+)
  bool wgmma = false;     // wgmma.mma_async (sm_90a only)

  // Shared memory a block may use without opting in at launch (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): 48 KiB
  // on every architecture since sm_70 (CUDA C++ Programming Guide). The runtime reads it without a Target: a
  // manifest names only its arch.
  static constexpr int64_t kSharedWithoutOptIn = 48 * 1024;
  // Shared memory the system reserves per resident block on sm_80 and later (CUDA C++ Programming Guide): what two
  // blocks on one SM leave each other.
  static constexpr int64_t kReservedSharedPerBlock = 1024;
  // Threads of one warp; the same on every NVIDIA GPU kiln targets.
  static constexpr int64_t kWarpSize = 32;
  // Bytes one thread moves with its widest load or store instruction.
  static constexpr int64_t kVectorBytes = 16;
  // Alignment of a TMA copy's shared destination, the 128-byte swizzle's 8-row atom: where a thread block holds several
  // blocks' shared memory (Kernel IR Kernel::groups), each share starts at a multiple of it.
  static constexpr int64_t kTmaSharedAlignment = kSwizzle128AtomBytes;
};

// The Targets kiln knows, in the order `--help` lists them.
const std::vector<Target>& knownTargets();
// The Target named by `arch`; a UserError naming the known ones if there is none.
const Target& targetFor(const std::string& arch);
// kDefaultArch's: the H200.
const Target& defaultTarget();
// "sm_80, sm_89, sm_90, sm_90a"
std::string knownArchList();

}  // namespace kiln
