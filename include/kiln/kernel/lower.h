// kernel-lower-from-tile: the one place that sees both Tile IR and Kernel IR.
#pragma once
#include "kiln/kernel/ir.h"
#include "kiln/tile/ir.h"

namespace kiln::kernel {

Program lowerFromTile(const tile::Program& p);

}  // namespace kiln::kernel
