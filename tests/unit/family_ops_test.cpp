// The ops that kept transformers families out (issue 44), on modules traced at test time with python3 + torch (the
// tests skip without them): aten::stack (GPT-J's and Cohere's interleaved rotary), in-place clamp_ on a fresh result
// (OLMo's clip_qkv), and a cat onto the legacy empty tensor torch.tensor([]) (transformers' DynamicCache, filled when a
// model is traced with its config's default use_cache=True); and the files PyTorch writes that are not traces, named.
// The whole families are models_test.cpp's fixtures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;

class FamilyOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveTorch()) GTEST_SKIP() << "python3 with torch not available";
  }
};

TEST_F(FamilyOps, StackClampAndLegacyEmptyCatMatchLibTorch) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class Stack(torch.nn.Module):\n"
      "    def forward(self, x, y):\n"
      "        a = torch.stack((x, -y), dim=-1).flatten(-2)\n"  // GPT-J's rotate_every_two
      "        b = torch.stack([x, y, x * y], dim=0)\n"
      "        return a * 2.0, b.sum(0), torch.stack([x], 1)\n"
      "class Clip(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        q = x * 3.0\n"
      "        q.clamp_(min=-0.5, max=0.5)\n"
      "        return q + 1.0\n"
      "class Cache(torch.nn.Module):\n"
      "    def forward(self, k):\n"
      "        keys = torch.cat([torch.tensor([]), k], dim=-2)\n"
      "        return keys * 2.0\n"
      "torch.jit.trace(Stack(), (torch.randn(2, 3, 4), torch.randn(2, 3, 4))).save('{0}/stack.pt')\n"
      "torch.jit.trace(Clip(), (torch.randn(4, 8),)).save('{0}/clip.pt')\n"
      "torch.jit.trace(Cache(), (torch.randn(1, 2, 5, 4),)).save('{0}/cache.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  expectCheckPasses(kiln({"run", (tmp.path / "stack.pt").string(), "--input", "x=2x3x4", "--input", "y=2x3x4", "--check",
                          "--interpret"}));
  expectCheckPasses(kiln({"run", (tmp.path / "clip.pt").string(), "--input", "x=4x8", "--check", "--interpret"}));
  expectCheckPasses(kiln({"run", (tmp.path / "cache.pt").string(), "--input", "k=1x2x5x4", "--check", "--interpret"}));
  // The clamp is kept (not dropped as an unused in-place result): its bound shows in the Tensor IR.
  Result ir = kiln({"compile", (tmp.path / "clip.pt").string(), "--input", "x=4x8", "--ir", "tensor"});
  EXPECT_EQ(ir.code, 0) << describe(ir);
  EXPECT_TRUE(contains(ir.out, "clamp") || contains(ir.out, "max")) << describe(ir);
}

// Any in-place op whose out-of-place form kiln lowers is that form on a fresh result (BERT's scores.masked_fill_,
// relu_, clamp_min_); an in-place op with no such form (fill_) stays refused in one line, and so does one on the input.
TEST_F(FamilyOps, InPlaceFormsOfLoweredOpsOnFreshResults) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class Fresh(torch.nn.Module):\n"
      "    def forward(self, x, m):\n"
      "        s = x * 2.0\n"
      "        s.masked_fill_(m, -1.0)\n"
      "        r = x - 0.5\n"
      "        r.relu_()\n"
      "        c = x + 0.25\n"
      "        c.clamp_min_(0.0)\n"
      "        return s + r + c\n"
      "class Fill(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        y = x * 2.0\n"
      "        y.fill_(3.0)\n"
      "        return y + x\n"
      "class OnInput(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        x.relu_()\n"
      "        return x * 2.0\n"
      "m = torch.rand(4, 8) > 0.5\n"
      "torch.jit.trace(Fresh(), (torch.randn(4, 8), m)).save('{0}/fresh.pt')\n"
      "torch.jit.trace(Fill(), (torch.randn(4, 8),)).save('{0}/fill.pt')\n"
      "torch.jit.trace(OnInput(), (torch.randn(4, 8),)).save('{0}/input.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  expectCheckPasses(kiln({"run", (tmp.path / "fresh.pt").string(), "--input", "x=4x8", "--input", "m=4x8:bool", "--check",
                          "--interpret"}));
  expectOneLineError(kiln({"compile", (tmp.path / "fill.pt").string(), "--input", "x=4x8"}), 1,
                     {"aten::fill_", "changes a tensor in place"});
  expectOneLineError(kiln({"compile", (tmp.path / "input.pt").string(), "--input", "x=4x8"}), 1,
                     {"aten::relu_", "other values read or share", "(aten::relu)"});
}

// DeepSeek-V2's rotary in complex numbers (issue 44): view_as_complex of pairs, products with a complex constant
// (torch.polar of the positions' angles), with another complex value of input data and with a real one, then
// view_as_real; computed on the real pairs. Another op on a complex value is refused in one line.
TEST_F(FamilyOps, ComplexRotaryAsRealPairs) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class Rotary(torch.nn.Module):\n"
      "    def forward(self, x, y):\n"
      "        angles = torch.arange(6).float()[:, None] * torch.tensor([1.0, 0.1])\n"
      "        cis = torch.polar(torch.ones_like(angles), angles)\n"
      "        z = torch.view_as_complex(x.reshape(2, 6, 2, 2))\n"
      "        w = torch.view_as_complex(y.reshape(2, 6, 2, 2))\n"
      "        return torch.view_as_real(z * cis).flatten(2), torch.view_as_real(z * w * 0.5).flatten(2)\n"
      "class Abs(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        return torch.view_as_complex(x.reshape(3, 2)).abs()\n"
      "torch.jit.trace(Rotary(), (torch.randn(2, 6, 4), torch.randn(2, 6, 4))).save('{0}/rotary.pt')\n"
      "torch.jit.trace(Abs(), (torch.randn(6),)).save('{0}/abs.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  expectCheckPasses(kiln({"run", (tmp.path / "rotary.pt").string(), "--input", "x=2x6x4", "--input", "y=2x6x4", "--check",
                          "--interpret"}));
  expectOneLineError(kiln({"compile", (tmp.path / "abs.pt").string(), "--input", "x=6"}), 1,
                     {"aten::abs", "complex values", "view_as_complex"});
}

// Outputs in a dict (a transformers ModelOutput traced with strict=False), nested in a tuple: its values in insertion
// order, as LibTorch's reference flattens them, named by their keys; a constant value among them is refused as any constant output is.
TEST_F(FamilyOps, DictOutputsAreTheirValuesInOrder) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import torch\n"
      "class Dict(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        return (x * 3.0, {{'b': x - 1.0, 'a': x.sum(0)}})\n"
      "class Constant(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        return {{'logits': x * 2.0, 'n': torch.ones(3)}}\n"
      "torch.jit.trace(Dict(), (torch.randn(2, 4),), strict=False).save('{0}/dict.pt')\n"
      "torch.jit.trace(Constant(), (torch.randn(2, 4),), strict=False).save('{0}/constant.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  Result r = kiln({"run", (tmp.path / "dict.pt").string(), "--input", "x=2x4", "--check", "--interpret"});
  expectCheckPasses(r);
  EXPECT_TRUE(contains(r.out, "output 1: f32[2x4]") && contains(r.out, "output 2: f32[4]")) << describe(r);
  // The dict's outputs are named by their keys from the Loop IR on (the tuple's first is out0 as before).
  Result ir = kiln({"compile", (tmp.path / "dict.pt").string(), "--input", "x=2x4", "--ir", "loop"});
  EXPECT_TRUE(contains(ir.out, "buffer out0 : f32[2x4] output") && contains(ir.out, "buffer b : f32[2x4] output") &&
              contains(ir.out, "buffer a : f32[4] output"))
      << describe(ir);
  expectOneLineError(kiln({"compile", (tmp.path / "constant.pt").string(), "--input", "x=2x4"}), 1,
                     {"model output is a constant"});
  Result ops = kiln({"inspect", (tmp.path / "dict.pt").string()});
  EXPECT_TRUE(contains(ops.out, "kiln supports every op on input data")) << describe(ops);
}

// What PyTorch writes besides TorchScript archives and torch.export archives is named as what it is, with how to save a
// trace instead (LibTorch's loader said only "failed locating file constants.pkl" or "not a ZIP archive").
TEST_F(FamilyOps, OtherPyTorchFilesAreNamedAsWhatTheyAre) {
  TempDir tmp;
  const std::string script = fmt::format(
      "import pickle, torch\n"
      "m = torch.nn.Linear(4, 4)\n"
      "torch.save(m.state_dict(), '{0}/state_dict.pt')\n"
      "torch.save(m, '{0}/module.pt')\n"
      "torch.save(m.state_dict(), '{0}/legacy.pt', _use_new_zipfile_serialization=False)\n"
      "pickle.dump({{'w': 1}}, open('{0}/plain.pkl', 'wb'))\n"
      "torch.export.save(torch.export.export(m, (torch.randn(2, 4),)), '{0}/exported.pt2')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp.path, script)) << script;
  const std::vector<std::string> trace = {"torch.jit.save(torch.jit.trace("};
  for (const char* name : {"state_dict.pt", "module.pt"}) {
    std::vector<std::string> want{"torch.save checkpoint", "not a traced model"};
    want.insert(want.end(), trace.begin(), trace.end());
    expectOneLineError(kiln({"compile", (tmp.path / name).string()}), 1, want);
  }
  for (const char* name : {"legacy.pt", "plain.pkl"}) {
    std::vector<std::string> want{"is a pickle", "not a TorchScript archive"};
    want.insert(want.end(), trace.begin(), trace.end());
    expectOneLineError(kiln({"inspect", (tmp.path / name).string()}), 1, want);
  }
  // torch.export archives are read (src/frontend/exported_program.cpp; more in cli_export_test.cpp).
  expectCheckPasses(kiln({"run", (tmp.path / "exported.pt2").string(), "--check", "--interpret"}));
}

}  // namespace
}  // namespace kiln
