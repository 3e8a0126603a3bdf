// tensor-fold-index-wraps: the negative-index wrap where(x < 0, x + n, x) of an index that is never negative (a
// router's expert ids) is dropped; an index the model takes as input keeps it.
#include <gtest/gtest.h>

#include <string>

#include "cli_support.h"
#include "kiln/driver/pipeline.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;

// The wraps left in a Tensor program: Where(Lt(x, 0), Add(x, n), x).
int wraps(const tensor::Graph& g) {
  int count = 0;
  for (const tensor::Node& n : g.nodes) {
    if (n.kind != tensor::Node::Kind::Elementwise || n.fn != tensor::Fn::Where || n.operands.size() != 3) continue;
    const tensor::Operand &c = n.operands[0], &x = n.operands[2];
    if (c.isImm() || x.isImm()) continue;
    const tensor::Node& lt = g.nodes[static_cast<size_t>(c.node)];
    count += lt.fn == tensor::Fn::Lt && lt.kind == tensor::Node::Kind::Elementwise && lt.operands[0].node == x.node;
  }
  return count;
}

tensor::Graph tensorIR(const std::string& path, std::vector<frontend::InputOverride> inputs, bool fold) {
  PipelineOptions opts;
  if (!fold) opts.disable.insert("tensor-fold-index-wraps");
  return compileModel(path, inputs, opts, "tensor").tensorIR;
}

// The tiny Mixtral's expert ids (topk's indices clamped into range, batched_mm) lose both layers' two wraps; in the
// grouped_mm form the sort's positions and their inverse lose theirs (the floor quotient perm // k keeps its own: its
// correction term is a subtraction the rule does not follow). Both still match LibTorch (models_test.cpp).
TEST(FoldIndexWraps, ARoutersExpertIdsAreNeverNegative) {
  const std::string batched = test::fixturePath("hf_mixtral_tiny"), grouped = test::fixturePath("hf_mixtral_tiny_grouped");
  EXPECT_EQ(wraps(tensorIR(batched, {}, false)), 4);
  EXPECT_EQ(wraps(tensorIR(batched, {}, true)), 0);
  const int before = wraps(tensorIR(grouped, {}, false)), after = wraps(tensorIR(grouped, {}, true));
  EXPECT_GT(before, 0);
  EXPECT_LT(after, before);
}

// Indices from the model's input may be negative: their wraps stay, and negative ids read from the end, as PyTorch.
TEST(FoldIndexWraps, AnInputIndexKeepsItsWrap) {
  if (!haveTorch()) GTEST_SKIP() << "python3 with torch not available";
  TempDir tmp;
  const std::string script = fmt::format(
      "import os, torch\n"
      "class Rows(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.w = torch.nn.Parameter(torch.randn(5, 3))\n"
      "    def forward(self, ids):\n"
      "        return self.w[ids] * 2.0, self.w[ids.clamp(min=0)] * 3.0\n"
      "ids = torch.tensor([4, -1, 0, -5])\n"
      "torch.jit.trace(Rows(), (ids,)).save('{0}/rows.pt')\n"
      "os.makedirs('{0}/in', exist_ok=True)\n"
      "ids.numpy().tofile('{0}/in/input0.bin')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  const std::string model = (tmp.path / "rows.pt").string();
  EXPECT_EQ(wraps(tensorIR(model, {frontend::InputOverride{"ids", {4}, DType::I64}}, true)), 1);
  expectCheckPasses(kiln({"run", model, "--input", "ids=4:i64", "--inputs", (tmp.path / "in").string(), "--check",
                          "--interpret"}));
}

}  // namespace
}  // namespace kiln
