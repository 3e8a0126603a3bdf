#include "kiln/kernel/operand_layout.h"

namespace kiln::kernel {

namespace {
constexpr int64_t kCore = 8;  // a core matrix is 8 x 8 elements
}  // namespace

SharedLayout wgmmaOperandLayout(const Stmt::CoreMatrices& l) {
  const int64_t row = kWgmmaOperandSwizzle.row();
  if (l.swizzle128 && l.mnMajor)  // rows of 64 n per k; blocks of 64 n rowStride apart, groups of 8 k kStride apart
    return SharedLayout{LayoutMode{row, 1, l.rowStride}, LayoutMode{kCore, row, l.kStride}, kWgmmaOperandSwizzle};
  if (l.swizzle128)  // rows of 64 k; groups of 8 rows rowStride apart
    return SharedLayout{LayoutMode{kCore, row, l.rowStride}, LayoutMode{row, 1, l.kStride}, kWgmmaOperandSwizzle};
  if (l.mnMajor)  // core matrices of 8 k by 8 contiguous n
    return SharedLayout{LayoutMode{kCore, 1, l.rowStride}, LayoutMode{kCore, kCore, l.kStride}, Swizzle{}};
  return SharedLayout{LayoutMode{kCore, kCore, l.rowStride}, LayoutMode{kCore, 1, l.kStride}, Swizzle{}};
}

WgmmaDescriptor wgmmaDescriptor(const Stmt::CoreMatrices& l, int64_t elementBytes) {
  const SharedLayout layout = wgmmaOperandLayout(l);
  WgmmaDescriptor d;
  d.swizzle128 = layout.swizzle.bits != 0;
  if (!d.swizzle128) {
    d.leadingBytes = layout.col.outerStride * elementBytes;
    d.strideBytes = layout.row.outerStride * elementBytes;
  } else if (l.mnMajor) {
    d.leadingBytes = layout.row.outerStride * elementBytes;
    d.strideBytes = layout.col.outerStride * elementBytes;
  } else {
    d.strideBytes = layout.row.outerStride * elementBytes;
  }
  return d;
}

SharedLayout tmaBoxLayout(const TensorMap& m, int64_t elementBytes) {
  return rowMajor(m.boxCols, m.swizzle128 ? kSwizzle128B.inElementsOf(elementBytes) : Swizzle{});
}

}  // namespace kiln::kernel
