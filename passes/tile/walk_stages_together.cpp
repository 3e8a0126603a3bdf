// tile-walk-stages-together: a reduction by vectors (RowReduction::reductionVector, tile-vectorize-reductions) whose
// stages are independent sums or maxima over one axis of one extent (loop::stagesIndependent: none reads another's
// total) walks that axis once for all of them (RowReduction::stagesTogether): each step loads the vectors of every
// stage, an operand two stages share (the activation row) once, and adds to every accumulator; the totals are then
// combined across the row one after the other.
//
// Which kernels: a decoder step's gate and up projections (two sums of the same activation row against two weight
// rows, silu(gate) * up in the result) and, after loop-fuse-norm-products, a product beside its norm's sum of squares.
// Walking the stages in turn reads the shared row once per stage and starts the second weight row only when the first
// is done; together, the loads of both weight rows are in flight at once.
//
// Precondition: tile-vectorize-reductions has chosen the reduction vectors. Postcondition: the verifier's rule
// (stagesTogether only with reductionVector > 1 and loop::stagesIndependent).
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool walkStagesTogether(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* r = std::get_if<RowReduction>(&p.schedules[i]);
    if (!r || r->reductionVector == 1 || r->stagesTogether || !loop::stagesIndependent(p.loop.kernels[i])) continue;
    r->stagesTogether = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
