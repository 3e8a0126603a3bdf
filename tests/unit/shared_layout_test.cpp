// The shared-memory layout value (kiln/support/shared_layout.h) and the Kernel IR layouts built from it
// (kiln/kernel/operand_layout.h): explicit indices, swizzled and not, and the wgmma descriptor fields they give.
#include <gtest/gtest.h>

#include "kiln/kernel/operand_layout.h"
#include "kiln/support/shared_layout.h"

namespace kiln {
namespace {

TEST(Swizzle, NoneIsTheIdentity) {
  for (int64_t o : {0, 1, 17, 1000, 4097}) EXPECT_EQ(Swizzle{}(o), o);
  EXPECT_EQ(Swizzle{}.atom(), 1);
}

TEST(Swizzle, TheByteSwizzleMovesSixteenByteChunksByTheRow) {
  // byte offset -> swizzled: chunk c of 128-byte row r moves to chunk c ^ (r mod 8); bytes inside a chunk stay.
  const std::pair<int64_t, int64_t> cases[] = {{0, 0},      {16, 16},     {128, 144},   {144, 128},  {145, 129},
                                               {1008, 896}, {1024 + 48, 1024 + 48}, {1152 + 32, 1152 + 48}};
  for (auto [from, to] : cases) EXPECT_EQ(kSwizzle128B(from), to) << from;
  EXPECT_EQ(kSwizzle128RowBytes, 128);
  EXPECT_EQ(kSwizzle128AtomBytes, 1024);
}

TEST(Swizzle, InElementsOfSixteenBits) {
  constexpr Swizzle s = kSwizzle128B.inElementsOf(2);
  EXPECT_EQ(s.bits, 3);
  EXPECT_EQ(s.base, 3);
  EXPECT_EQ(s.shift, 3);
  EXPECT_EQ(s.chunk(), 8);
  EXPECT_EQ(s.row(), 64);
  EXPECT_EQ(s.period(), 8);
  EXPECT_EQ(s.atom(), 512);
  // Element e is byte 2e: the element swizzle is the byte swizzle halved.
  for (int64_t e = 0; e < 2048; ++e) EXPECT_EQ(s(e) * 2, kSwizzle128B(e * 2)) << e;
  EXPECT_EQ(kSwizzle128B.inElementsOf(4).chunk(), 4);
}

TEST(SharedLayout, RowMajorUnswizzled) {
  constexpr SharedLayout l = rowMajor(10);
  EXPECT_EQ(l(0, 0, 0), 0);
  EXPECT_EQ(l(5, 2, 3), 28);
  EXPECT_EQ(l(0, 7, 9), 79);
}

TEST(SharedLayout, RowMajorSwizzledBoxes) {
  const SharedLayout bf16 = rowMajor(64, kSwizzle128B.inElementsOf(2));  // rows of 64 bf16: 128 bytes
  EXPECT_EQ(bf16(0, 0, 0), 0);
  EXPECT_EQ(bf16(0, 1, 0), 72);    // row 1, chunk 0 -> chunk 1
  EXPECT_EQ(bf16(0, 1, 9), 65);    // row 1, chunk 1 -> chunk 0, element 1 of it
  EXPECT_EQ(bf16(0, 3, 17), 201);  // row 3, chunk 2 -> chunk 1
  EXPECT_EQ(bf16(0, 8, 17), 529);  // row 8 repeats row 0
  const SharedLayout f32 = rowMajor(32, kSwizzle128B.inElementsOf(4));  // rows of 32 f32
  EXPECT_EQ(f32(0, 2, 5), 77);  // row 2, chunk 1 -> chunk 3
}

// The element each wgmma operand layout reads, as the interpreter computed it before the layout value existed.
int64_t expectedWgmmaElement(const kernel::Stmt::CoreMatrices& l, int64_t from, int64_t r, int64_t kk) {
  if (l.swizzle128) {
    const int64_t logical = l.mnMajor ? from + (r / 64) * l.rowStride + (kk / 8) * l.kStride + (kk % 8) * 64 + r % 64
                                      : from + (r / 8) * l.rowStride + (r % 8) * 64 + kk;
    return logical ^ (((logical / 64) % 8) * 8);
  }
  return l.mnMajor ? from + (r / 8) * l.rowStride + (kk / 8) * l.kStride + (kk % 8) * 8 + r % 8
                   : from + (r / 8) * l.rowStride + (kk / 8) * l.kStride + (r % 8) * 8 + kk % 8;
}

TEST(WgmmaOperandLayout, ExplicitElements) {
  using CM = kernel::Stmt::CoreMatrices;
  EXPECT_EQ(kernel::wgmmaOperandLayout(CM{64, 512})(0, 9, 10), 586);                // K-major core matrices
  EXPECT_EQ(kernel::wgmmaOperandLayout(CM{64, 128, false, true})(0, 9, 10), 209);   // MN-major core matrices
  EXPECT_EQ(kernel::wgmmaOperandLayout(CM{0, 512, true})(0, 3, 10), 210);           // K-major, 128-byte swizzle
  EXPECT_EQ(kernel::wgmmaOperandLayout(CM{0, 512, true})(16, 3, 10), 194);          // from column 16 of the row
  EXPECT_EQ(kernel::wgmmaOperandLayout(CM{512, 4096, true, true})(0, 70, 9), 4686);  // MN-major, 128-byte swizzle
}

TEST(WgmmaOperandLayout, EveryElementAsTheInterpreterReadsIt) {
  using CM = kernel::Stmt::CoreMatrices;
  const std::pair<CM, int64_t> cases[] = {{CM{64, 512}, 0},         {CM{64, 512}, 1024},         {CM{64, 128, false, true}, 64},
                                          {CM{0, 512, true}, 0},    {CM{0, 512, true}, 48},      {CM{0, 512, true}, 2048 + 32},
                                          {CM{512, 4096, true, true}, 0}, {CM{512, 8192, true, true}, 1024}};
  for (const auto& [l, from] : cases)
    for (int64_t r = 0; r < 256; ++r)
      for (int64_t kk = 0; kk < 16; ++kk)
        ASSERT_EQ(kernel::wgmmaOperandLayout(l)(from, r, kk), expectedWgmmaElement(l, from, r, kk))
            << "k stride " << l.kStride << " row stride " << l.rowStride << " swizzle " << l.swizzle128 << " mn-major "
            << l.mnMajor << " from " << from << " at (" << r << ", " << kk << ")";
}

TEST(WgmmaDescriptor, FieldsFollowFromTheLayout) {
  using CM = kernel::Stmt::CoreMatrices;
  kernel::WgmmaDescriptor d = kernel::wgmmaDescriptor(CM{64, 512}, 2);
  EXPECT_FALSE(d.swizzle128);
  EXPECT_EQ(d.leadingBytes.value_or(-1), 128);
  EXPECT_EQ(d.strideBytes, 1024);
  d = kernel::wgmmaDescriptor(CM{64, 128, false, true}, 2);
  EXPECT_EQ(d.leadingBytes.value_or(-1), 128);
  EXPECT_EQ(d.strideBytes, 256);
  d = kernel::wgmmaDescriptor(CM{0, 512, true}, 2);  // K-major swizzled: the leading offset is unused
  EXPECT_TRUE(d.swizzle128);
  EXPECT_FALSE(d.leadingBytes.has_value());
  EXPECT_EQ(d.strideBytes, 1024);
  d = kernel::wgmmaDescriptor(CM{512, 4096, true, true}, 2);  // MN-major swizzled: blocks of 64 n, groups of 8 k
  EXPECT_TRUE(d.swizzle128);
  EXPECT_EQ(d.leadingBytes.value_or(-1), 8192);
  EXPECT_EQ(d.strideBytes, 1024);
}

TEST(TmaBoxLayout, SwizzledAndPlainBoxes) {
  kernel::TensorMap m;
  m.boxRows = 16;
  m.boxCols = 64;
  EXPECT_EQ(kernel::tmaBoxLayout(m, 2)(0, 3, 17), 3 * 64 + 17);
  m.swizzle128 = true;
  for (int64_t r = 0; r < m.boxRows; ++r)  // chunk c / 8 of row r at chunk (c / 8) ^ (r mod 8)
    for (int64_t c = 0; c < m.boxCols; ++c) EXPECT_EQ(kernel::tmaBoxLayout(m, 2)(0, r, c), r * 64 + ((c / 8) ^ (r % 8)) * 8 + c % 8);
}

}  // namespace
}  // namespace kiln
