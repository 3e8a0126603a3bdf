// When two kernels of a Tile-IR program are the same code: kernel-lower-from-tile lowers the first and copies it for
// the others (identical decoder layers), rebinding the copy's parameters to the other kernel's buffers.
#pragma once
#include <string>
#include <vector>

#include "kiln/tile/ir.h"

namespace kiln::tile {

// The key under which a kernel is reused: its loop nest and schedule with every buffer replaced by its order of
// first appearance, kind, dtype and shape. Fills `buffers` with the kernel's buffer ids in that order. Empty
// for kernels that are never reused (those reading indices from memory: their lowering names the index buffer).
std::string reuseKey(const Program& p, size_t kernel, std::vector<int>& buffers);

}  // namespace kiln::tile
