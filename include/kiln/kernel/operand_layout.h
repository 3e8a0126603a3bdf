// The shared-memory layouts of Kernel IR's wgmma operands and TMA boxes as SharedLayout values
// (kiln/support/shared_layout.h), and what follows from them: the wgmma matrix descriptor's fields. The interpreter
// reads elements through these layouts and the emitter writes descriptors from them, so both see one layout.
#pragma once
#include <cstdint>
#include <optional>

#include "kiln/kernel/ir.h"
#include "kiln/support/shared_layout.h"

namespace kiln::kernel {

// wgmma operands are 16-bit: under the 128-byte swizzle, chunks of 8 elements, rows of 64, 8-row groups (the swizzle's
// atom) of 512.
inline constexpr Swizzle kWgmmaOperandSwizzle = kSwizzle128B.inElementsOf(2);

// Element (row r of m or n, k) of a wgmma operand (16-bit elements) laid out as `l` says, from its start: 8 x 8 core
// matrices (K-major: 8 contiguous k; MN-major: 8 contiguous rows), or under the 128-byte swizzle rows of 64 elements
// (K-major: 64 k of one row of m or n; MN-major: 64 n of one k).
SharedLayout wgmmaOperandLayout(const Stmt::CoreMatrices& l);

// The fields of wgmma's shared-memory matrix descriptor for an operand in layout `l` of `elementBytes` elements: the
// leading byte offset (between core matrices adjacent in k; MN-major swizzled, between blocks of 64 n; none where it
// is unused: K-major swizzled, a wgmma's 16 k lie in one 128-byte row) and the stride byte offset (between core
// matrices adjacent in m or n; MN-major swizzled, between groups of 8 k), and the swizzle mode.
struct WgmmaDescriptor {
  std::optional<int64_t> leadingBytes;
  int64_t strideBytes = 0;
  bool swizzle128 = false;
};
WgmmaDescriptor wgmmaDescriptor(const Stmt::CoreMatrices& l, int64_t elementBytes);

// Element (r, c) of a TMA box of `m` (elements of `elementBytes`) from the box's start (a multiple of the swizzle's
// atom): row-major rows of boxCols, under the 128-byte swizzle with swizzle128.
SharedLayout tmaBoxLayout(const TensorMap& m, int64_t elementBytes);

}  // namespace kiln::kernel
