// tile-vectorize-accesses sizes a row reduction's threads per row by its length and the rows there are: softmax over
// 16,384 rows of 512 (TinyLlama's attention probabilities at 512 tokens) fills more than the H200's resident threads,
// so the thread count is halved, down to 4 vectors a thread for f32 rows (measured faster than 8 on the H200) and 8 for
// 16-bit rows; fewer rows keep one vector a thread.
#include <gtest/gtest.h>

#include "kiln/driver/pipeline.h"
#include "kiln/frontend/frontend.h"
#include "test_support.h"

namespace kiln {
namespace {

tile::RowReduction softmaxRows(const std::string& shape, std::optional<DType> dtype) {
  Compiled c = compileModel(test::fixturePath("softmax"), {frontend::parseInputOverride("x=" + shape)}, {}, "tile", dtype);
  for (const tile::Schedule& s : c.tileIR.schedules)
    if (auto* r = std::get_if<tile::RowReduction>(&s)) return *r;
  ADD_FAILURE() << "no row reduction";
  return {};
}

TEST(VectorizeRows, F32RowsHalveDownToFourVectorsAThread) {
  const tile::RowReduction r = softmaxRows("2x4x2048x512", std::nullopt);
  EXPECT_EQ(r.vector, 4);
  EXPECT_EQ(r.threadsPerRow, 32);  // 128 vectors of 4 f32, 4 a thread
  EXPECT_EQ(r.rowsPerBlock, 4);
  EXPECT_TRUE(r.rowInRegisters);
}

TEST(VectorizeRows, SixteenBitRowsHalveFurther) {
  const tile::RowReduction r = softmaxRows("2x4x4096x512", DType::BF16);  // 32,768 rows of 64 vectors of 8 bf16
  EXPECT_EQ(r.vector, 8);
  EXPECT_EQ(r.threadsPerRow, 8);  // 8 vectors a thread
  EXPECT_TRUE(r.rowInRegisters);
}

TEST(VectorizeRows, FewRowsKeepOneVectorAThread) {
  const tile::RowReduction r = softmaxRows("2x4x64x512", std::nullopt);  // 512 rows
  EXPECT_EQ(r.threadsPerRow, 128);
}

}  // namespace
}  // namespace kiln
