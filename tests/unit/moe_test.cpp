// Mixture of experts (issue 44): the routing ops (aten::topk, repeat_interleave, indexing by a tensor of input data, the
// router's in-place renormalisation) on modules traced at test time with python3 + torch (skipped without them), and
// the tiny Mixtral fixture (transformers' batched_mm experts) run at one token, where the Kernel-IR interpreter counts
// what the expert products read: only the experts the router chose, not all of them. The whole MoE families are
// models_test.cpp's fixtures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_support.h"
#include "kiln/driver/pipeline.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;

class MoE : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveTorch()) GTEST_SKIP() << "python3 with torch not available";
  }
};

// topk in both directions along an inner dim, with NaN (ranked above every number, as PyTorch: first of the largest,
// last of the smallest), inf and -inf among the values (one per row: PyTorch's order among equal values is its own); its indices compared exactly (i64 outputs). With sorted=False PyTorch's order is its own (unspecified, not
// kiln's sorted one), so there only what does not depend on it is compared: the values' sum and which positions were
// chosen (a scatter of ones at the indices).
TEST_F(MoE, TopkMatchesLibTorch) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class TopK(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        v, i = torch.topk(x, 3, dim=-1)\n"
      "        w, j = torch.topk(x, 2, dim=1, largest=False)\n"
      "        u, k = torch.topk(x * 2.0, 4, dim=-1, sorted=False)\n"
      "        chosen = torch.zeros_like(x).scatter(-1, k, 1.0)\n"
      "        return v, i, w, j, u.sum(-1), chosen\n"
      "torch.jit.trace(TopK(), (torch.randn(2, 5, 8),)).save('{0}/topk.pt')\n"
      "x = torch.randn(2, 5, 8)\n"
      "x[0, 1, 3] = float('nan')\n"
      "x[1, 0, 2] = float('nan')\n"
      "x[1, 2, 4] = float('-inf')\n"
      "x[0, 3, 5] = float('inf')\n"
      "import os\n"
      "os.makedirs('{0}/in', exist_ok=True)\n"
      "x.numpy().tofile('{0}/in/input0.bin')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  expectCheckPasses(kiln({"run", (tmp.path / "topk.pt").string(), "--input", "x=2x5x8", "--check", "--interpret"}));
  expectCheckPasses(kiln({"run", (tmp.path / "topk.pt").string(), "--input", "x=2x5x8", "--inputs", (tmp.path / "in").string(),
                          "--check", "--interpret"}));
}

// Indexing by tensors of input data: rows of a weight by a 1-D index (negative ones wrapped, as aten::index does), a
// 2-D index along an inner dim of input data, two index tensors broadcast together (at the first dims, and after a
// slice), and repeat_interleave along a dim and over the flattened tensor.
TEST_F(MoE, IndexByTensorAndRepeatInterleaveMatchLibTorch) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class Index(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.w = torch.nn.Parameter(torch.randn(5, 6, 6))\n"
      "    def forward(self, x, ids):\n"
      "        a = self.w[ids]\n"
      "        b = x[:, ids.view(2, 2)]\n"
      "        c = x.repeat_interleave(2, dim=1)\n"
      "        d = x.repeat_interleave(3)\n"
      "        rows = torch.arange(3).view(3, 1)\n"
      "        e = x[rows, ids.view(1, 4)]\n"  // two index tensors broadcast (BERT: mask[batch_idx, kv_idx])
      "        f = self.w[:, ids[:2], ids[2:]]\n"  // two adjacent index dims after a slice
      "        return a * 2.0, b + 1.0, c, d, e, f\n"
      "torch.jit.trace(Index(), (torch.randn(3, 6), torch.tensor([4, -1, 0, -5]))).save('{0}/index.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  expectCheckPasses(kiln({"run", (tmp.path / "index.pt").string(), "--input", "x=3x6", "--input", "ids=4:i64", "--check",
                          "--interpret"}));
}

// DeepSeek-V3's and GPT-OSS's routing and attention ops: gather and scatter (a value and a src form, scatter_ on a
// fresh zeros_like) at data-dependent indices (a topk's, distinct in each row), writes through slices and a select of
// a new_empty tensor read afterwards, max and min along a dim with their indices, and torch.maximum. A view taken
// before such a write and read after it is refused in one line.
TEST_F(MoE, GatherScatterSliceWritesAndExtremesMatchLibTorch) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class Ops(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        idx = torch.topk(x, 2, dim=1).indices\n"
      "        g = x.gather(1, idx)\n"
      "        mask = torch.zeros_like(x)\n"
      "        mask.scatter_(1, idx, 1.0)\n"
      "        s = x.scatter(1, idx, g * 2.0)\n"
      "        k = x.new_empty(3, 7)\n"
      "        k[:, :5] = x\n"
      "        k[:, 5:] = g\n"
      "        k[1] = k[1] * 3.0\n"
      "        m, i = x.max(dim=1)\n"
      "        n, j = x.min(dim=0, keepdim=True)\n"
      "        return g, mask, s, k * 1.0, m, i, n, j, torch.maximum(x, g.sum(1, keepdim=True)), x.max()\n"
      "class Stale(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        k = x.new_empty(3, 5)\n"
      "        v = k[:, 1:3]\n"
      "        k[:, :2] = x[:, :2]\n"
      "        return v * 2.0, k * 1.0\n"
      "torch.jit.trace(Ops(), (torch.randn(3, 5),)).save('{0}/ops.pt')\n"
      "torch.jit.trace(Stale(), (torch.randn(3, 5),), check_trace=False).save('{0}/stale.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  for (const char* seed : {"1", "2"})
    expectCheckPasses(kiln({"run", (tmp.path / "ops.pt").string(), "--input", "x=3x5", "--seed", seed, "--check", "--interpret"}));
  expectOneLineError(kiln({"compile", (tmp.path / "stale.pt").string(), "--input", "x=3x5"}), 1,
                     {"aten::copy_", "view aten::slice", "read after the write"});
}

// transformers' grouped_mm experts' routing: sort (stable; NaN placed as PyTorch, descending too), cumsum (into int32,
// computed as i64), histc (a given range, the data's range, an empty one), floor_divide (by a constant and by a
// tensor, negative quotients floored), index_put_ on an empty_like (the inverse permutation) and _grouped_mm over
// offsets made from the data, on fixed inputs with ties.
TEST_F(MoE, GroupedRoutingOpsMatchLibTorch) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import os, torch\n"
      "class Route(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.w = torch.nn.Parameter(torch.randn(3, 4, 8))\n"
      "    def forward(self, ids, x, h):\n"
      "        s, perm = torch.sort(ids)\n"
      "        sd, pd = torch.sort(x, dim=1, descending=True)\n"
      "        counts = torch.histc(s.float(), bins=3, min=0, max=2)\n"
      "        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)\n"
      "        inv = torch.empty_like(perm)\n"
      "        inv[perm] = torch.arange(perm.size(0))\n"
      "        rows = h[perm // 2]\n"
      "        out = torch.nn.functional.grouped_mm(rows, self.w, offs=offs)[inv]\n"
      "        return (s, perm, sd, pd, offs.long(), inv, torch.floor_divide(ids - 3, ids + 1), perm // -3, out,\n"
      "                torch.histc(h, 4), torch.histc(h * 0.0 + 2.0, 3, 2, 2))\n"
      "ids = torch.tensor([2, 0, 1, 2, 0, 2])\n"
      "x = torch.tensor([[0.5, -1.0, 0.5, 3.0, -2.0], [1.0, float('nan'), -1.0, 2.0, 0.0], [4.0, 4.0, -4.0, 1.0, 1.0]])\n"
      "h = torch.randn(3, 4)\n"
      "torch.jit.trace(Route(), (ids, x, h)).save('{0}/route.pt')\n"
      "os.makedirs('{0}/in', exist_ok=True)\n"
      "for i, t in enumerate((ids, x, h)): t.numpy().tofile(f'{0}/in/input{{i}}.bin')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  expectCheckPasses(kiln({"run", (tmp.path / "route.pt").string(), "--input", "ids=6:i64", "--input", "x=3x5", "--input",
                          "h=3x4", "--inputs", (tmp.path / "in").string(), "--check", "--interpret"}));
}

// Mixtral's router: softmax, topk, and top_value /= top_value.sum(-1, keepdim=True), an in-place division of a value
// its sum read first (nothing reads it after the change): taken as the out-of-place division. A view taken before
// the change and read after it still refuses it, and so do indexing by a boolean mask and by tensors at dims a slice
// separates.
TEST_F(MoE, RouterRenormalisesInPlaceAndIndexRefusalsAreOneLine) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class Router(torch.nn.Module):\n"
      "    def forward(self, logits):\n"
      "        p = torch.softmax(logits, dim=-1, dtype=torch.float)\n"
      "        top, idx = torch.topk(p, 2, dim=-1)\n"
      "        top /= top.sum(dim=-1, keepdim=True)\n"
      "        return top, idx\n"
      "class Mask(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        return x[x > 0] * 2.0\n"
      "class Two(torch.nn.Module):\n"
      "    def forward(self, x, i, j):\n"
      "        return x[i, :, j] * 2.0\n"
      "torch.jit.trace(Router(), (torch.randn(6, 4),)).save('{0}/router.pt')\n"
      "torch.jit.trace(Mask(), (torch.randn(4, 3),), check_trace=False).save('{0}/mask.pt')\n"
      "torch.jit.trace(Two(), (torch.randn(4, 3, 5), torch.tensor([0, 1]), torch.tensor([2, 0]))).save('{0}/two.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  expectCheckPasses(kiln({"run", (tmp.path / "router.pt").string(), "--input", "logits=6x4", "--check", "--interpret"}));
  expectOneLineError(kiln({"compile", (tmp.path / "mask.pt").string(), "--input", "x=4x3"}), 1,
                     {"aten::index", "boolean mask", "torch.where"});
  expectOneLineError(kiln({"compile", (tmp.path / "two.pt").string(), "--input", "x=4x3x5", "--input", "i=2:i64", "--input",
                           "j=2:i64"}),
                     1, {"aten::index", "a slice between them", "torch.gather"});
}

// The tiny Mixtral (4 experts, 2 chosen per token; models/hf_families.py) at one token, its experts in both of
// transformers' forms (batched_mm; grouped_mm, the default): its expert products read the gathered rows of the
// chosen experts' weights only, k/E of each expert weight, which the Kernel-IR interpreter's read counts show; the
// result still matches LibTorch.
class MoEProducts : public ::testing::TestWithParam<std::string> {};

TEST_P(MoEProducts, OneTokenReadsOnlyTheChosenExperts) {
  const std::string path = test::fixturePath(GetParam());
  Compiled c = compileModel(path, {frontend::InputOverride{"input_ids", {1, 1}, DType::I64}}, PipelineOptions{}, "cuda");
  const std::vector<HostTensor> inputs = test::randomInputs(c.kernelIR, 7);
  kernel::InterpretCounts counts;
  const std::vector<HostTensor> out = kernel::interpret(c.kernelIR, inputs, &counts);
  const std::vector<HostTensor> ref = frontend::runReference(path, inputs, /*onGpu=*/false);
  ASSERT_EQ(out.size(), ref.size());
  EXPECT_LE(compare(out[0], ref[0]).relL2, 1e-5);
  const int64_t experts = 4, chosen = 2;
  int expertWeights = 0;
  for (size_t b = 0; b < c.kernelIR.buffers.size(); ++b) {
    const loop::Buffer& buf = c.kernelIR.buffers[b];
    if (buf.kind != loop::Buffer::Kind::Weight || buf.name.find(".experts.") == std::string::npos) continue;
    ++expertWeights;
    int64_t read = 0;
    for (const auto& perKernel : counts.elementsRead) read += perKernel[b];
    EXPECT_EQ(read, numel(buf.shape) / experts * chosen) << buf.name << " (" << numel(buf.shape) << " elements)";
  }
  EXPECT_EQ(expertWeights, 4) << "gate_up_proj and down_proj of two layers";
}

INSTANTIATE_TEST_SUITE_P(Mixtral, MoEProducts, ::testing::Values("hf_mixtral_tiny", "hf_mixtral_tiny_grouped"));

// `kiln inspect` lists no unsupported op for any of issue 44's families (models_test.cpp checks them against LibTorch).
TEST(MoEFamilies, InspectSupportsEveryOp) {
  for (const char* family : {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss"})
    for (const char* form : {"", "_grouped"}) {
      Result r = kiln({"inspect", test::fixturePath(fmt::format("hf_{}_tiny{}", family, form))});
      EXPECT_TRUE(r.code == 0 && contains(r.out, "kiln supports every op on input data")) << describe(r);
    }
  for (const char* encoder : {"bert", "roberta", "distilbert"}) {
    Result r = kiln({"inspect", test::fixturePath(fmt::format("hf_{}_tiny", encoder))});
    EXPECT_TRUE(r.code == 0 && contains(r.out, "kiln supports every op on input data")) << describe(r);
  }
}

}  // namespace
}  // namespace kiln
