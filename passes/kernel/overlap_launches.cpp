// kernel-overlap-launches (kiln/kernel/lower.h): on targets with programmatic dependent launch (sm_90+), every
// kernel waits for the grids before it at its entry and lets the next grid launch once its blocks are done, so the
// runtime can launch each kernel while the one before it still drains (Kernel::programmaticLaunch).
//
// Why: a forward is a chain of kernels, many of them a few microseconds long (the norms, the pointwise maps, the
// skinny products). Launched one after another, each pays its launch and its blocks' start-up after the previous grid
// has drained. With the wait at the very top of the body, nothing of the kernel touches memory before its
// predecessors are done, so the overlap cannot change a result: only launch latency moves off the critical path.
//
// Except the kernels that stream f32 operands into shared memory with cp.async (the f32 products of
// tile-stream-ffma-products, f32 attention): they launch after the grid before them has completed and let the next
// grid launch only once they have. Measured on an H100 (bench/results/2026-12-06-h100-pdl-f32-0b87c08.md), overlapping them made the
// TinyLlama-shaped f32 forward 13 % slower (9.885 ms against 8.704 ms with this rule, 8.731 ms with no overlap at all)
// and the f32 products at 512 tokens up to 1.5x slower, while the bf16 forward keeps its gain (1.414 ms with the rule,
// 1.415 with every kernel overlapped, 1.465 with none). Why the f32 streams lose has not been profiled.
#include "kiln/kernel/lower.h"

namespace kiln::kernel {
namespace {

// Whether a statement of `b` copies into an f32 shared buffer with cp.async: an f32 product streamed through rings for
// CUDA-core FMAs (tile-stream-ffma-products), or f32 attention staging its keys and values.
bool streamsF32(const Kernel& k, const Block& b) {
  for (const Stmt& s : b) {
    if (const auto* c = std::get_if<op::CpAsync>(&s.op); c && k.shared.at(static_cast<size_t>(c->shared)).dtype == DType::F32)
      return true;
    if (streamsF32(k, s.body)) return true;
  }
  return false;
}

}  // namespace

bool overlapLaunches(Program& p) {
  if (!p.target.programmaticLaunch) return false;
  bool changed = false;
  for (Kernel& k : p.kernels) {
    const bool overlap = !streamsF32(k, k.body);
    changed |= k.programmaticLaunch != overlap;
    k.programmaticLaunch = overlap;
  }
  return changed;
}

}  // namespace kiln::kernel
