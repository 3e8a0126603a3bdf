// A ring of shared-memory slots that a pipelined loop's steps use in turn: the cp.async and TMA rings of products
// (lower_contraction_async.cpp, lower_contraction_tma.cpp, lower_contraction_specialized.cpp) and the k/v ring of
// flash attention (lower_attention_loop.cpp). Step i uses slot i mod depth for the (i div depth)-th time, so an
// mbarrier per slot has completed i div depth phases when step i's copies are waited for, and the wait takes that
// phase's parity. One place for this arithmetic, which every pipelined lowering needs and each used to write out.
// Rounds of `depth` steps on constant slots are kernel-unroll-rings' (passes/kernel/unroll_rings.cpp), from these
// expressions.
//
// The expressions are built exactly as those lowerings built them (the emitted CUDA did not change): callers pass the
// step index as they compute it (e.g. `st - first_step` for attention's walk).
#pragma once
#include <cstdint>

#include "kiln/support/index_expr.h"

namespace kiln::kernel::detail {

struct Ring {
  int64_t depth;  // slots

  // The slot step i uses.
  Idx slot(const Idx& i) const { return mod(i, depth); }
  // The slot of step i + ahead (the copies a step issues ahead of the one it multiplies).
  Idx slotAhead(const Idx& i, int64_t ahead) const { return mod(idxAdd(i, ahead), depth); }
  // The parity of step i's phase of its slot's mbarrier, (i div depth) mod 2; `later` phases after it:
  // (i div depth + later) mod 2 (the phase in which a slot is released once more before its refill).
  Idx parity(const Idx& i, int64_t later = 0) const {
    return later == 0 ? mod(floorDiv(i, depth), 2) : mod(idxAdd(floorDiv(i, depth), later), 2);
  }
};

}  // namespace kiln::kernel::detail
