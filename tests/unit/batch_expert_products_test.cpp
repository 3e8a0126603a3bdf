// loop-batch-expert-products: a product whose B matrix each row picks by an index read from memory becomes one product
// per matrix, read back at each row's own, when the rows are sorted by that index (Loop IR in, Loop IR out); its tiled
// schedule skips the tiles that hold none of a matrix's rows (the Kernel-IR interpreter's read counts), and the result
// still matches LibTorch.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_support.h"
#include "kiln/driver/pipeline.h"
#include "kiln/kernel/ir.h"
#include "kiln/loop/parser.h"
#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"
#include "kiln/tile/ir.h"
#include "kiln/support/error.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;

// Rows of x each multiplied by the matrix of w their group picks; the group of row p0 is the number of offsets at or
// below p0 (transformers' grouped_mm experts: rows sorted by expert, offsets the cumulative counts), or as `group`
// says; z reads the product.
std::string groupedProduct(int64_t rows, const std::string& group = "min(max(ids[p0], 0), 3)", const std::string& count = "select(offsets[r0] < p0 + 1, 1, 0)",
                           const std::string& outputs = "z") {
  return fmt::format(R"(// kiln loop IR: grouped
buffer offsets : i64[4] input
buffer x : f32[{0}x8] input
buffer w : f32[4x16x8] weight "w"
buffer ids : i64[{0}] temp
buffer y : f32[{0}x16] temp
buffer z : f32[{0}x16] output

kernel k0_reduce_sum writes ids  // aten::_grouped_mm
  for p0 < {0} parallel:
    acc0 = 0
    for r0 < 4 reduce:
      %0 = {2}
      %1 = cast(%0) to i64
      acc0 = sum(acc0, %1)
    %2 = min(acc0, 3)
    store ids[p0] = %2

kernel k1_reduce_sum writes y  // aten::_grouped_mm
  for p0 < {0}, p1 < 16 parallel:
    acc0 = 0
    for r0 < 8 reduce:
      %0 = load x[p0, r0]
      %1 = load w[{1}, p1, r0]
      %2 = mul(%0, %1)
      acc0 = sum(acc0, %2)
    store y[p0, p1] = acc0

kernel k2_silu writes z  // aten::silu
  for p0 < {0}, p1 < 16 parallel:
    %0 = load y[p0, p1]
    %1 = silu(%0)
    store z[p0, p1] = %1

return {3}
)",
                     rows, group, count, outputs);
}

std::string afterPass(const std::string& text) {
  loop::Program p = loop::parse(text, "grouped.lir");
  loop::verify(p);
  loop::batchExpertProducts(p);
  loop::verify(p);
  return loop::print(p);
}

TEST(BatchExpertProducts, SortedRowsBecomeOneProductPerMatrixReadAtEachRowsOwn) {
  const std::string out = afterPass(groupedProduct(32));
  EXPECT_NE(out.find("buffer y : f32[4x32x16] temp"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(kernel k1_reduce_sum writes y  // aten::_grouped_mm
  for ex < 4, p0 < 32, p1 < 16 parallel:
    acc0 = 0
    for r0 < 8 reduce:
      %0 = load x[p0, r0]
      %1 = load w[ex, p1, r0]
      %2 = mul(%0, %1)
      acc0 = sum(acc0, %2)
    store y[ex, p0, p1] = acc0
  read only at ex = min(max(ids[p0], 0), 3)
)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("%0 = load y[min(max(ids[p0], 0), 3), p0, p1]"), std::string::npos) << out;
  // The text reads back as it printed, the kernel's read-only points with it.
  loop::Program parsed = loop::parse(out, "after.lir");
  ASSERT_TRUE(parsed.kernels[1].readOnlyAt.has_value());
  EXPECT_EQ(parsed.kernels[1].readOnlyAt->rowAxis, 1);
  EXPECT_EQ(loop::print(parsed), out);
}

TEST(BatchExpertProducts, UnsortedFewOrOutputRowsKeepTheirProduct) {
  // The group counts offsets above the row: it falls as the row grows (rows not sorted by it).
  const std::string falling = groupedProduct(32, "min(max(ids[p0], 0), 3)", "select(p0 < offsets[r0], 1, 0)");
  EXPECT_EQ(afterPass(falling), loop::print(loop::parse(falling)));
  // The group read straight from an input: nothing says it is sorted (transformers' batched_mm experts).
  const std::string input = groupedProduct(32, "min(max(offsets[p0 mod 4], 0), 3)");
  EXPECT_EQ(afterPass(input), loop::print(loop::parse(input)));
  // Fewer than 16 rows: a decoder step's matrix-vector products read only the chosen matrices already.
  const std::string few = groupedProduct(8);
  EXPECT_EQ(afterPass(few), loop::print(loop::parse(few)));
  // The product is a model output: its shape stays the model's.
  const std::string output = groupedProduct(32, "min(max(ids[p0], 0), 3)", "select(offsets[r0] < p0 + 1, 1, 0)", "z, y");
  EXPECT_EQ(afterPass(output), loop::print(loop::parse(output)));
}

TEST(BatchExpertProducts, AGroupOverTheMatrixAxisOrOutsideTheMatricesIsRefused) {
  const std::string text = afterPass(groupedProduct(32)), line = "read only at ex = min(max(ids[p0], 0), 3)";
  std::string other = text;
  other.replace(other.find(line), line.size(), "read only at ex = min(max(ids[ex], 0), 3)");
  EXPECT_ANY_THROW(loop::parse(other));
  std::string wide = text;
  wide.replace(wide.find(line), line.size(), "read only at ex = min(max(ids[p0], 0), 4)");
  EXPECT_ANY_THROW(loop::verify(loop::parse(wide)));
}

// The tiny Mixtral in transformers' grouped_mm form at 64 tokens: 128 rows (token, choice) sorted by expert, 4 experts.
// Each expert product is tiled along the rows; a tile's block for expert e reads e's weight only when one of its rows
// chose e, so each weight is read at most (experts + row tiles - 1) times over (once per expert, plus one expert for
// each boundary between two tiles), not once per row as a matrix-vector product per row would. The output matches
// LibTorch.
TEST(BatchExpertProducts, ManyTokensReadEachExpertOncePerTileThatHoldsIt) {
  const std::string path = test::fixturePath("hf_mixtral_tiny_grouped");
  Compiled c = compileModel(path, {frontend::InputOverride{"input_ids", {1, 64}, DType::I64}}, PipelineOptions{}, "cuda");
  const std::vector<HostTensor> inputs = test::randomInputs(c.kernelIR, 3);
  kernel::InterpretCounts counts;
  const std::vector<HostTensor> out = kernel::interpret(c.kernelIR, inputs, &counts);
  const std::vector<HostTensor> ref = frontend::runReference(path, inputs, /*onGpu=*/false);
  ASSERT_EQ(out.size(), ref.size());
  EXPECT_LE(compare(out[0], ref[0]).relL2, 1e-5);
  const int64_t experts = 4, rows = 128;
  int grouped = 0;
  for (size_t i = 0; i < c.tileIR.loop.kernels.size(); ++i) {
    const loop::Kernel& k = c.tileIR.loop.kernels[i];
    if (!k.readOnlyAt) continue;
    ++grouped;
    const auto* s = std::get_if<tile::TiledContraction>(&c.tileIR.schedules[i]);
    ASSERT_NE(s, nullptr) << k.name << " is tiled";
    const int64_t rowTiles = (rows + s->tileM - 1) / s->tileM;
    loop::forEachKernelRead(k, [&](int b, bool) {
      const loop::Buffer& buf = c.kernelIR.buffers[static_cast<size_t>(b)];
      if (buf.kind != loop::Buffer::Kind::Weight || buf.name.find(".experts.") == std::string::npos) return;
      int64_t read = 0;
      for (const auto& perKernel : counts.elementsRead) read += perKernel[static_cast<size_t>(b)];
      EXPECT_LE(read, numel(buf.shape) / experts * (experts + rowTiles - 1)) << buf.name << ", tiles of " << s->tileM << " rows";
      EXPECT_GE(read, numel(buf.shape) / experts) << buf.name;
      EXPECT_LT(read, numel(buf.shape) / experts * rows) << buf.name << ": less than one matrix per row";
    });
  }
  EXPECT_EQ(grouped, 4) << "gate_up and down of two layers";
}

// In bf16 the tiny Mixtral's gate/up expert product goes to wgmma with both operands copied by TMA: the expert's
// matrix W[ex] is rows ex * N .. ex * N + N - 1 of W's tensor map (tile::TmaView::rowShift). The Kernel-IR interpreter's
// result (TMA copies and wgmma emulated) passes DESIGN.md's bf16 check against LibTorch.
TEST(BatchExpertProducts, InBf16TheExpertMatrixIsARowShiftOfTheTmaCopies) {
  test::TempDir tmp;
  const std::string script = fmt::format(
      "import sys, torch\n"
      "sys.path.insert(0, '{0}')\n"
      "import hf_families\n"
      "from hf_llama import example_inputs\n"
      "from kiln_export import export\n"
      "model = hf_families.build('mixtral', experts='grouped_mm').to(torch.bfloat16)\n"
      "export(model, example_inputs(256, seq=64), '{1}/mixtral.pt')\n",
      (std::filesystem::path(KILN_SOURCE_DIR) / "models").string(), tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  const std::string path = (tmp.path / "mixtral.pt").string();
  Compiled c = compileModel(path, {}, PipelineOptions{}, "tile");
  int shifted = 0;
  for (size_t i = 0; i < c.tileIR.loop.kernels.size(); ++i) {
    const auto* s = std::get_if<tile::TiledContraction>(&c.tileIR.schedules[i]);
    if (!c.tileIR.loop.kernels[i].readOnlyAt || !s || s->b.copy != tile::TiledContraction::Copy::Tma) continue;
    const tile::Contraction con = tile::contractionOf(*s, c.tileIR.loop.kernels[i]);
    const int nVar = c.tileIR.loop.kernels[i].parallel[static_cast<size_t>(con.nAxis)].var;
    auto view = tile::tmaView(c.tileIR.loop, c.tileIR.loop.kernels[i], con.stages[0].b, nVar, con.stages[0].kVar);
    ASSERT_TRUE(view && view->rowShift) << c.tileIR.loop.kernels[i].name;
    EXPECT_EQ(toString(view->rowShift), "ex*256") << "gate_up: 2 x 128 rows a matrix";
    ++shifted;
  }
  EXPECT_EQ(shifted, 2) << tile::print(c.tileIR);
  expectCheckPasses(kiln({"run", path, "--check", "--interpret"}));
}

// A decoder step's expert products (few rows, each against the matrix its expert id picks) stay row by row, and with
// more outputs than a thread each can serve well (2 rows x 12288 outputs here, as a Mixtral-shaped layer's 2 x 28672),
// every output is a warp walking its row by 16-byte vectors (tile-cooperative-reduce, tile-vectorize-reductions): each
// row's activations are the vector that all its outputs share. Before, such a product got a thread per output reading
// its weight row alone, serially and uncoalesced. The result matches LibTorch.
TEST(BatchExpertProducts, ADecoderStepsExpertProductsReadTheirRowsByVectors) {
  test::TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class Experts(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.w = torch.nn.Parameter(torch.randn(4, 12288, 128))\n"
      "    def forward(self, x, ids):\n"
      "        return torch.bmm(self.w[ids], x.unsqueeze(-1)).squeeze(-1)\n"
      "torch.jit.trace(Experts(), (torch.randn(2, 128), torch.tensor([3, 1]))).save('{}/experts.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  const std::string path = (tmp.path / "experts.pt").string();
  Compiled c = compileModel(path, {frontend::InputOverride{"x", {2, 128}, DType::F32}, frontend::InputOverride{"ids", {2}, DType::I64}},
                            PipelineOptions{}, "tile");
  int products = 0;
  for (size_t i = 0; i < c.tileIR.loop.kernels.size(); ++i) {
    if (c.tileIR.loop.kernels[i].stages.empty()) continue;
    ++products;
    const auto* r = std::get_if<tile::RowReduction>(&c.tileIR.schedules[i]);
    ASSERT_NE(r, nullptr) << tile::print(c.tileIR);
    EXPECT_EQ(r->reductionVector, 4) << "16 bytes of f32";
  }
  EXPECT_EQ(products, 1) << tile::print(c.tileIR);
  expectCheckPasses(kiln({"run", path, "--input", "x=2x128:f32", "--input", "ids=2:i64", "--check", "--interpret"}));
}

}  // namespace
}  // namespace kiln
