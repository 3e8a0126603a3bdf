// Shared-memory layouts as one small value: where element (row, col) of a tile lies, as per-axis strides composed with
// an XOR swizzle. The Kernel IR interpreter (wgmma operands, TMA boxes), the emitter's wgmma descriptors
// (kernel/wgmma_layout.h) and the Tile level's slice slots (tile/layout.cpp) read the 128-byte swizzle from here, so the
// hardware's permutation is written once. Header-only and constexpr: the unit tests check it index by index.
#pragma once
#include <cstdint>

namespace kiln {

// An XOR swizzle of offsets: the `bits` bits of an offset starting at bit base + shift are XORed into the `bits` bits
// starting at bit `base`. Counted in bytes, the 128-byte swizzle of TMA and wgmma is {3, 4, 3}: 16-byte chunks (base 4)
// of 128-byte rows (3 bits of chunk) are permuted by the row within groups of 8 rows (the 3 bits above them).
// bits = 0 is no swizzle.
struct Swizzle {
  int bits = 0, base = 0, shift = 0;

  constexpr int64_t operator()(int64_t offset) const {
    if (bits == 0) return offset;
    const int64_t mask = ((int64_t{1} << bits) - 1) << (base + shift);
    return offset ^ ((offset & mask) >> shift);
  }
  // Units of one chunk that moves as a whole (16 bytes in the 128-byte swizzle), chunks of one row, units of one row.
  constexpr int64_t chunk() const { return int64_t{1} << base; }
  constexpr int64_t chunksPerRow() const { return int64_t{1} << bits; }
  constexpr int64_t row() const { return chunk() << bits; }
  // Rows whose chunks the swizzle permutes before its pattern repeats, and the units they span: where a swizzled tile
  // must start (its alignment).
  constexpr int64_t period() const { return int64_t{1} << bits; }
  constexpr int64_t atom() const { return bits == 0 ? 1 : int64_t{1} << (base + shift + bits); }
  // The same permutation counted in elements of `elementBytes` (a power of two at most one chunk).
  constexpr Swizzle inElementsOf(int64_t elementBytes) const {
    int log = 0;
    while ((int64_t{1} << log) < elementBytes) ++log;
    return bits == 0 ? Swizzle{} : Swizzle{bits, base - log, shift};
  }
};

// The 128-byte swizzle in bytes (CU_TENSOR_MAP_SWIZZLE_128B, the wgmma descriptor's 128B mode).
inline constexpr Swizzle kSwizzle128B{3, 4, 3};
// Bytes of one 128-byte-swizzled row, and of the 8-row group a swizzled tile starts at a multiple of.
inline constexpr int64_t kSwizzle128RowBytes = kSwizzle128B.row();
inline constexpr int64_t kSwizzle128AtomBytes = kSwizzle128B.atom();

// One axis of a layout: coordinate x lies at (x mod inner) * innerStride + (x / inner) * outerStride (a mode of two
// levels: within a core matrix or swizzled row, and between them).
struct LayoutMode {
  int64_t inner = 1, innerStride = 0, outerStride = 0;
  constexpr int64_t operator()(int64_t x) const { return (x % inner) * innerStride + (x / inner) * outerStride; }
};

// A 2-D tile in shared memory: element (row, col) of a tile starting at `start` lies at swizzle(start + row(r) +
// col(c)), in elements. The swizzle applies to the whole offset (as the hardware applies it to the address), so a
// swizzled tile's start is a multiple of swizzle.atom() where it must line up with the pattern.
struct SharedLayout {
  LayoutMode row, col;
  Swizzle swizzle;
  constexpr int64_t operator()(int64_t start, int64_t r, int64_t c) const { return swizzle(start + row(r) + col(c)); }
};

// Row-major rows of `rowElements`, under `swizzle` (in elements): a TMA box, a [row][64] slice of 16-bit operands.
constexpr SharedLayout rowMajor(int64_t rowElements, Swizzle swizzle = {}) {
  return SharedLayout{LayoutMode{1, 0, rowElements}, LayoutMode{rowElements, 1, 0}, swizzle};
}

}  // namespace kiln
