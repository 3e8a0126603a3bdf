// The arena plan of a compiled program: where each buffer lives in the one device allocation a loaded model makes
// (the offsets manifest.json records). Inputs, outputs, weights and counters each get a slice of their own (a state's
// new value written in place takes its current value's: kernel::Program::inPlace). Temporaries share a region after
// them: each lives from the first kernel that binds it to the last, and two whose lives do not overlap may take the
// same bytes (greedy, largest first, each at the lowest offset clear of the temporaries alive with it).
//
// Why sharing is safe on the GPU: the kernels run in launch order, and a kernel launched early (programmatic dependent
// launch, kernel-overlap-launches) waits for the grids before it at its very top, before it touches memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernel/ir.h"

namespace kiln::cuda {

struct MemoryPlan {
  std::vector<int64_t> offsets;    // per buffer, into the arena (multiples of runtime::kArenaAlignment)
  std::vector<int64_t> inPlaceOf;  // per buffer: the input whose bytes it is written over, or -1
  // Per buffer: the first and last kernel (indices) that bind it, {-1, -1} for a buffer no kernel binds.
  std::vector<std::pair<int, int>> lifetimes;
  int64_t arenaBytes = 0;
  int64_t fixedBytes = 0;          // inputs, outputs, weights and counters, each apart
  int64_t temporaryBytes = 0;      // the temporaries' region
  int64_t unsharedTemporaryBytes = 0;  // what it would take with every temporary apart
};
MemoryPlan planMemory(const kernel::Program& p);

// For `kiln compile --explain-memory`: the arena's size and parts, then a line per temporary (bytes, offset, the
// kernels it lives across), largest first.
std::string explainMemory(const kernel::Program& p);

}  // namespace kiln::cuda
