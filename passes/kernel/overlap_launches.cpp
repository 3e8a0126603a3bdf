// kernel-overlap-launches (kiln/kernel/lower.h): on targets with programmatic dependent launch (sm_90+), every
// kernel waits for the grids before it at its entry and lets the next grid launch once its blocks are done, so the
// runtime can launch each kernel while the one before it still drains (Kernel::programmaticLaunch).
//
// Why: a forward is a chain of kernels, many of them a few microseconds long (the norms, the pointwise maps, the
// skinny products). Launched one after another, each pays its launch and its blocks' start-up after the previous grid
// has drained. With the wait at the very top of the body, nothing of the kernel touches memory before its
// predecessors are done, so the overlap cannot change a result: only launch latency moves off the critical path.
#include "kiln/kernel/lower.h"

namespace kiln::kernel {

bool overlapLaunches(Program& p) {
  if (!p.target.programmaticLaunch) return false;
  bool changed = false;
  for (Kernel& k : p.kernels) {
    changed |= !k.programmaticLaunch;
    k.programmaticLaunch = true;
  }
  return changed;
}

}  // namespace kiln::kernel
