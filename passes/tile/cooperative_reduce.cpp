// tile-cooperative-reduce: a kernel whose reduction covers at least kCooperativeReduceMinExtent points
// gets one block per output. Its threads (knob `threads`: the reduction length rounded up to a power of
// two, 32..256) stride over the reduction and combine their partial results through shared memory.
// Shorter reductions stay serial per thread, where one thread's loop is cheaper than a block-wide combine.
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool cooperativeReduce(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    const loop::Kernel& k = p.loop.kernels[i];
    if (!k.reduction || p.schedules[i].strategy == Strategy::BlockPerOutput) continue;
    int64_t extent = k.iterations() / k.parallelPoints();
    if (extent < kCooperativeReduceMinExtent) continue;
    int64_t threads = 32;
    while (threads < extent && threads < 256) threads *= 2;
    p.schedules[i] = Schedule{Strategy::BlockPerOutput, {{"threads", threads}}};
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
