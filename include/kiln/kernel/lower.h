// kernel-lower-from-tile: the one place that sees both Tile IR and Kernel IR.
#pragma once
#include "kiln/kernel/ir.h"
#include "kiln/tile/ir.h"

namespace kiln::kernel {

struct LowerOptions {
  // Kernels that are the same computation on other buffers (each decoder layer's, in a Llama) are lowered once:
  // later ones get a copy of the first one's Kernel IR with their own buffers bound to its parameters. The
  // result is identical to lowering each kernel on its own (tests compare both); false does that.
  bool reuseIdenticalKernels = true;
};

struct LowerStats {
  int lowered = 0;  // kernels built from their schedule
  int reused = 0;   // kernels copied from an identical one lowered earlier
};

Program lowerFromTile(const tile::Program& p, const LowerOptions& options = {}, LowerStats* stats = nullptr);

// kernel-multicast-operands: in a kernel of thread-block clusters, the copies through a tensor map marked `multicast in
// C parts` are shared by the cluster: each block copies one part of every box into all of them, with the cluster
// arrivals and barriers that needs (passes/kernel/multicast_operands.cpp says which). Returns whether it changed any.
bool multicastOperands(Program& p);

// kernel-unroll-rings: a k loop marked `unroll ring D` (TiledContraction::unrollRing) walks rounds of D steps, each on a
// constant ring slot with one barrier parity per round (passes/kernel/unroll_rings.cpp says how). Returns whether it
// unrolled any.
bool unrollRings(Program& p);

// kernel-store-only-changes: a kernel writing a state in place whose stored value is the input's element but where
// comparisons of indices hold (a decoder step's cache write at its position) stores only there, under those
// comparisons (passes/kernel/store_only_changes.cpp says which). Returns whether it changed any.
bool storeOnlyChanges(Program& p);

// kernel-launch-only-changes: a kernel whose statements all lie under comparisons pinning one of its index variables,
// defined from the flat thread index, to a value no thread index changes (a cache write at the position) launches only
// the threads where it holds (passes/kernel/launch_only_changes.cpp says which). Returns whether it changed any.
bool launchOnlyChanges(Program& p);

// kernel-merge-launches: adjacent kernels of the CUDA-core family that neither read nor write what the others write
// become one launch, each body on its own range of blocks (passes/kernel/merge_launches.cpp says which merge). A state
// in Program::inPlace counts as one buffer with its current value. Returns whether it merged any.
bool mergeLaunches(Program& p);

// kernel-finish-in-last-block: small kernels launched right after a kernel run inside it, in its block that finishes
// last (passes/kernel/finish_in_last_block.cpp says which), counting at a new `tail_counters` buffer. Returns whether
// it changed any.
bool finishInLastBlock(Program& p);

// kernel-overlap-launches: on a target with programmatic dependent launch (sm_90+), every kernel waits for the grids
// before it at its entry and lets the next one launch after its body (Kernel::programmaticLaunch). Returns whether it changed any.
bool overlapLaunches(Program& p);

}  // namespace kiln::kernel
