// Plain traces (no kiln_inputs.json) through the CLI: input names from the forward's arguments, shapes from
// --input, the one-line error naming each input without a shape, and `kiln inspect`. The models come from
// models/plain_trace.py, run with python3 + torch at test time (the tests skip without them).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>

#include "cli_support.h"
#include "kiln/loop/ir.h"
#include "test_support.h"

namespace kiln {
namespace {
using test::TempDir;
using namespace test::cli;
namespace fs = std::filesystem;

class PlainTrace : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("python3 -c 'import torch' >/dev/null 2>&1") != 0) return;
    dir_ = std::make_unique<TempDir>();
    std::string cmd = fmt::format("python3 {} {} >/dev/null 2>&1", quote((fs::path(KILN_SOURCE_DIR) / "models/plain_trace.py").string()),
                                  quote(dir_->path.string()));
    if (std::system(cmd.c_str()) != 0) dir_.reset();
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "python3 with torch not available (or models/plain_trace.py failed)";
  }
  static std::string model(const std::string& name) { return (dir_->path / (name + ".pt")).string(); }
  static bool runPython(const TempDir& dir, const std::string& script) { return test::cli::runPython(dir.path, script); }
  static std::unique_ptr<TempDir> dir_;
};
std::unique_ptr<TempDir> PlainTrace::dir_;

TEST_F(PlainTrace, MissingShapesNameEachInputWithAnExample) {
  std::string m = model("plain_two");
  expectOneLineError(kiln({"compile", m}), 1,
                     {m, "kiln_inputs.json", "'ids', 'features'", "--input ids=1x8:i64", "--input features=1x8x48:f32"});
  // Given one, the error names only the other.
  Result r = kiln({"run", m, "--interpret", "--input", "ids=2x8:i64"});
  expectOneLineError(r, 1, {"input 'features'", "--input features=1x8x48:f32"});
  EXPECT_FALSE(contains(r.err, "'ids'")) << describe(r);
}

// kiln inspect --json of a plain trace: each input's name and an example --input, no shapes.
TEST_F(PlainTrace, InspectJsonGivesAnExampleForEachInput) {
  Result r = kiln({"inspect", model("plain_two"), "--json"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["inputs_recorded"].get<bool>());
  ASSERT_EQ(j["inputs"].size(), 2u);
  EXPECT_EQ(j["inputs"][0]["name"], "ids");
  EXPECT_EQ(j["inputs"][0]["example"], "ids=1x8:i64");
  EXPECT_FALSE(j["inputs"][0].contains("shape"));
}

TEST_F(PlainTrace, InputGivesTheShapeAndTheCheckPasses) {
  Result r = kiln({"run", model("plain_mlp"), "--input", "x=2x8x64", "--check", "--interpret"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "output 0: f32[2x8x64]")) << describe(r);
  EXPECT_TRUE(contains(r.out, "kiln: check passed against LibTorch")) << describe(r);

  r = kiln({"run", model("plain_two"), "--input", "ids=2x8:i64", "--input", "features=2x8x48", "--check", "--interpret"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "kiln: check passed against LibTorch")) << describe(r);
}

TEST_F(PlainTrace, InputNamingNoArgumentListsTheForwardsArguments) {
  expectOneLineError(kiln({"compile", model("plain_two"), "--input", "y=2x8"}), 2, {"'y'", "ids, features"});
}

TEST_F(PlainTrace, InspectNeedsNoShapes) {
  Result r = kiln({"inspect", model("plain_two")});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(r.err.empty()) << describe(r);
  for (const char* want : {"model plain_two", "inputs: 2, no shapes recorded", "e.g. --input ids=1x8:i64",
                           "e.g. --input features=1x8x48:f32", "parameters: 3 tensors, 2080 elements, 8320 bytes",
                           "(f32 3)", "buffers: none", "kiln supports every op on input data"})
    EXPECT_TRUE(contains(r.out, want)) << want << "\n" << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  aten::embedding +1\n)"))) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  aten::linear +1\n)"))) << describe(r);
}

TEST_F(PlainTrace, InspectNamesTheUnsupportedOps) {
  Result r = kiln({"inspect", model("plain_cumprod")});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  aten::cumprod +1  not supported\n)"))) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  aten::mul +1\n)"))) << describe(r);
  EXPECT_TRUE(contains(r.out, "not supported by kiln: aten::cumprod; see docs/ops.md")) << describe(r);
  EXPECT_TRUE(contains(r.out, "parameters: none")) << describe(r);
}

// In-place arithmetic: taken as its functional form when the changed tensor is a fresh result nothing else reads,
// refused in one line when another value shares it (here a view, which must see the change).
TEST_F(PlainTrace, InPlaceOpsOnlyWhereNothingReadsTheOldValue) {
  TempDir tmp;
  std::string script = fmt::format(
      "import torch\n"
      "class Ok(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        y = x * 2.0\n"
      "        y.add_(1.0)\n"
      "        return y\n"
      "class Reread(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        y = x * 2.0\n"
      "        v = y.view(-1)\n"
      "        y.mul_(3.0)\n"
      "        return v * 1.5\n"
      "torch.jit.trace(Ok(), (torch.randn(2, 4),)).save('{0}/ok.pt')\n"
      "torch.jit.trace(Reread(), (torch.randn(2, 4),)).save('{0}/reread.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  Result ok = kiln({"run", (tmp.path / "ok.pt").string(), "--input", "x=2x4", "--check", "--interpret"});
  expectCheckPasses(ok);
  expectOneLineError(kiln({"compile", (tmp.path / "reread.pt").string(), "--input", "x=2x4"}), 1,
                     {"aten::mul_", "other values read or share", "out-of-place op (aten::mul)"});
}

// argmax as torch.argmax: the first of equal maxima, NaN counting as the maximum, along a dim (kept or not) or over the
// flattened tensor; checked on rows made of ties, a NaN after the maximum, and -inf, in f32 and bf16 (the index itself
// exact: the positions are counted in f32 whatever the input's dtype).
TEST_F(PlainTrace, ArgmaxIsTheFirstMaximumNanIncluded) {
  TempDir tmp;
  std::string script = fmt::format(
      "import torch\n"
      "class M(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        return torch.argmax(x, dim=-1), torch.argmax(x, 0, keepdim=True), torch.argmax(x)\n"
      "x = torch.tensor([[1., 3., 3., 0.], [2., 5., float('nan'), 5.], [-float('inf')] * 4])\n"
      "for name, t in (('f32', x), ('bf16', x.to(torch.bfloat16))):\n"
      "    torch.jit.trace(M(), (t,)).save('{0}/argmax_' + name + '.pt')\n"
      "    import os; os.makedirs('{0}/in_' + name, exist_ok=True)\n"
      "    t.contiguous().view(torch.int16 if name == 'bf16' else torch.int32).numpy().tofile('{0}/in_' + name + '/input0.bin')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string model = (tmp.path / fmt::format("argmax_{}.pt", dtype)).string();
    const std::string inputs = (tmp.path / fmt::format("in_{}", dtype)).string();
    Result r = kiln({"run", model, "--input", fmt::format("x=3x4:{}", dtype), "--inputs", inputs, "--check", "--interpret"});
    expectCheckPasses(r);
  }
}

// A weight the forward transposes (Falcon's x @ weight.T) or permutes: freezing folds the view into a constant that
// still views the weight's memory; kiln keeps the weight as stored and permutes it in Tensor IR (so the products
// read it k-contiguous, as the wgmma products stream it), and computes what LibTorch does. A [K, N] weight multiplied
// from the right (GPT-2's Conv1D, addmm(b, x, W)) is kept as its transpose [N, K] instead, for the same reason.
TEST_F(PlainTrace, TransposedWeightsKeepTheirStoredLayout) {
  TempDir tmp;
  std::string script = fmt::format(
      "import torch\n"
      "class M(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.weight = torch.nn.Parameter(torch.randn(48, 32))\n"
      "        self.w3 = torch.nn.Parameter(torch.randn(6, 4, 32))\n"
      "        self.conv = torch.nn.Parameter(torch.randn(32, 40))\n"
      "        self.bias = torch.nn.Parameter(torch.randn(40))\n"
      "    def forward(self, x):\n"
      "        return (x @ self.weight.T, (x.unsqueeze(1) * self.w3.permute(1, 0, 2)).sum(-1),\n"
      "                torch.addmm(self.bias, x * 2.0, self.conv))\n"
      "torch.jit.trace(M().eval(), (torch.randn(4, 32),)).save('{0}/t.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  Result t = kiln({"compile", (tmp.path / "t.pt").string(), "--input", "x=4x32", "--ir", "tensor"});
  EXPECT_TRUE(contains(t.out, ": f32[48x32]\n")) << describe(t);
  EXPECT_FALSE(contains(t.out, ": f32[32x48]\n")) << "no transposed copy of the weight\n" << describe(t);
  EXPECT_TRUE(contains(t.out, ": f32[6x4x32]\n")) << describe(t);
  EXPECT_TRUE(contains(t.out, ": f32[40x32]\n")) << "the Conv1D weight, k-major\n" << describe(t);
  EXPECT_FALSE(contains(t.out, ": f32[32x40]\n")) << describe(t);
  Result r = kiln({"run", (tmp.path / "t.pt").string(), "--input", "x=4x32", "--check", "--interpret"});
  expectCheckPasses(r);
}

// Issue 9's families as plain traces: each tiny transformers fixture saved again by torch.jit.save without kiln's
// kiln_inputs.json (what `torch.jit.trace(model, (ids,)).save(path)` writes) runs with its shape given by --input and
// passes the interpreter check against LibTorch.
TEST_F(PlainTrace, EveryTransformersFamilyFromAPlainTrace) {
  const std::vector<std::string> families = {"gpt2", "gpt_neox", "phi", "phi3", "stablelm", "falcon",
                                             "qwen2", "qwen3", "mistral", "gemma", "gemma2", "llama"};
  TempDir tmp;
  std::string script = "import torch, zipfile\n";
  for (const std::string& f : families) {
    script += fmt::format("torch.jit.load('{0}').save('{1}/{2}.pt')\n", test::fixturePath("hf_" + f + "_tiny"),
                          tmp.path.string(), f);
    script += fmt::format("assert not any('kiln_inputs' in n for n in zipfile.ZipFile('{0}/{1}.pt').namelist())\n",
                          tmp.path.string(), f);
  }
  ASSERT_TRUE(runPython(tmp, script)) << script;
  for (const std::string& f : families) {
    std::string m = (tmp.path / (f + ".pt")).string();
    SCOPED_TRACE(f);
    expectOneLineError(kiln({"compile", m}), 1, {"'input_ids'", "--input input_ids="});
    expectCheckPasses(kiln({"run", m, "--input", "input_ids=1x16:i64", "--check", "--interpret"}));
  }
}

// A pickle record that stores into a memo slot far past the next one (data.pkl's first BINPUT made LONG_BINPUT 402653184)
// made LibTorch's unpickler allocate 6.6 GB before anything failed; kiln walks the pickles first and refuses it in one line.
TEST_F(PlainTrace, PickleMemoSlotFarAheadIsOneLine) {
  TempDir tmp;
  std::string script = fmt::format(
      "import zipfile, struct\n"
      "z = zipfile.ZipFile('{0}')\n"
      "with zipfile.ZipFile('{1}/m.pt', 'w', zipfile.ZIP_STORED) as out:\n"
      "    for n in z.namelist():\n"
      "        d = z.read(n)\n"
      "        if n.endswith('/data.pkl'):\n"
      "            i = d.index(b'q\\x00')\n"
      "            d = d[:i] + b'r' + struct.pack('<I', 0x18000000) + d[i + 2:]\n"
      "        out.writestr(n, d)\n",
      model("plain_mlp"), tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  expectOneLineError(kiln({"compile", (tmp.path / "m.pt").string(), "--input", "x=2x8x64"}), 1,
                     {"m.pt", "data.pkl", "memo slot 402653184", "export the model again"});
}

// A debug record (code/....py.debug_pkl) whose source pieces index past its text table crashed LibTorch's loader (found
// by fuzz/pt_fuzzer.cpp): kiln reads the debug records first and refuses a damaged one in one line.
TEST_F(PlainTrace, DamagedDebugRecordIsOneLine) {
  TempDir tmp;
  std::string script = fmt::format(
      "import pickle, zipfile\n"
      "src = zipfile.ZipFile('{0}')\n"
      "out = zipfile.ZipFile('{1}/bad.pt', 'w')\n"
      "def past(x):\n"
      "    if isinstance(x, list): return [10 ** 6 for _ in x]\n"
      "    if isinstance(x, tuple): return tuple(past(e) for e in x)\n"
      "    return x\n"
      "for info in src.infolist():\n"
      "    data = src.read(info)\n"
      "    if info.filename.endswith('mlp.py.debug_pkl'):\n"
      "        v = pickle.loads(data)\n"
      "        data = pickle.dumps((v[0], v[1], tuple((r[0], past(r[1]), r[2]) for r in v[2])), protocol=2)\n"
      "    out.writestr(info, data)\n"
      "out.close()\n",
      (fs::path(KILN_SOURCE_DIR) / "models/fixtures/mlp.pt").string(), tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  expectOneLineError(kiln({"compile", (tmp.path / "bad.pt").string(), "--ir", "tensor"}), 1,
                     {"is damaged: its debug record code/__torch__/mlp.py.debug_pkl points past its text table", "export the model again"});
}

// A value used twice per step (tanh(x) + x, 200 steps) doubles the fused expression at every inlining: without
// loop-fuse-producers' bound on a kernel's operations this took tens of GB; now it compiles into several kernels and
// computes what LibTorch does.
TEST_F(PlainTrace, DoublingChainsStayBounded) {
  TempDir tmp;
  std::string script = fmt::format(
      "import torch\n"
      "class M(torch.nn.Module):\n"
      "    def forward(self, x):\n"
      "        for i in range(200):\n"
      "            x = x * 0.5 + 0.01 if i % 2 else torch.tanh(x) + x\n"
      "        return x\n"
      "torch.jit.trace(M(), (torch.randn(2, 4),)).save('{0}/chain.pt')\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  Result r = kiln({"run", (tmp.path / "chain.pt").string(), "--input", "x=2x4", "--check", "--interpret"});
  expectCheckPasses(r);
  Result why = kiln({"compile", (tmp.path / "chain.pt").string(), "--input", "x=2x4", "--explain-fusion"});
  EXPECT_TRUE(contains(why.out, "operations (its ")) << describe(why);
  EXPECT_TRUE(contains(why.out, fmt::format("bound {})", loop::kMaxFusedApplies))) << describe(why);
}

// A kiln_inputs.json kiln cannot use is one line naming the file and the way out.
TEST_F(PlainTrace, BadInputRecordsAreOneLine) {
  TempDir tmp;
  std::string script = fmt::format(
      "import torch\n"
      "m = torch.jit.trace(torch.nn.Linear(4, 4).eval(), (torch.randn(2, 4),))\n"
      "m.save('{0}/malformed.pt', _extra_files={{'kiln_inputs.json': '{{not json'}})\n"
      "m.save('{0}/two.pt', _extra_files={{'kiln_inputs.json': '{{\"inputs\": [{{\"name\": \"a\", \"shape\": [2, 4], "
      "\"dtype\": \"f32\"}}, {{\"name\": \"b\", \"shape\": [2, 4], \"dtype\": \"f32\"}}]}}'}})\n"
      "m.save('{0}/half.pt', _extra_files={{'kiln_inputs.json': '{{\"inputs\": [{{\"name\": \"x\", \"shape\": [1.5, 4], "
      "\"dtype\": \"f32\"}}]}}'}})\n"
      "m.save('{0}/zero.pt', _extra_files={{'kiln_inputs.json': '{{\"inputs\": [{{\"name\": \"x\", \"shape\": [0, 4], "
      "\"dtype\": \"f32\"}}]}}'}})\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  std::string malformed = (tmp.path / "malformed.pt").string(), two = (tmp.path / "two.pt").string();
  expectOneLineError(kiln({"compile", malformed}), 1, {malformed, "kiln_inputs.json is malformed", "--input"});
  expectOneLineError(kiln({"inspect", malformed}), 1, {malformed, "kiln_inputs.json is malformed"});
  expectOneLineError(kiln({"compile", two}), 1, {two, "takes 1 inputs but records 2", "models/kiln_export.py"});
  // A dimension of 1.5 was read as 1, one of 0 reached LibTorch.
  const std::string half = (tmp.path / "half.pt").string(), zero = (tmp.path / "zero.pt").string();
  expectOneLineError(kiln({"compile", half}), 1, {half, "gives input 'x' the dimension 1.5; dimensions are positive integers"});
  expectOneLineError(kiln({"compile", zero}), 1, {zero, "gives input 'x' the dimension 0"});
}

// An archive whose tensor data record is empty (found by fuzzing: LibTorch loads it with a null storage, and
// freeze_module crashed on it) is refused in one line naming the tensor; one whose record is shorter, too.
TEST_F(PlainTrace, EmptyTensorRecordIsOneLine) {
  TempDir tmp;
  std::string script = fmt::format(
      "import zipfile\n"
      "def damaged(name, record, cut):\n"
      "    src, out = zipfile.ZipFile('models/fixtures/mlp.pt'), zipfile.ZipFile('{0}/' + name, 'w')\n"
      "    for n in src.namelist():\n"
      "        out.writestr(n, cut(src.read(n)) if n.endswith(record) else src.read(n))\n"
      "    out.close()\n"
      "damaged('empty.pt', '/data/0', lambda b: b'')\n"
      "damaged('short.pt', '/data/1', lambda b: b[:len(b) // 2])\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  std::string empty = (tmp.path / "empty.pt").string(), shorter = (tmp.path / "short.pt").string();
  expectOneLineError(kiln({"compile", empty, "--ir", "loop"}), 1,
                     {empty, "is damaged: tensor 'gate_proj.weight' (8192 elements) has an empty data record"});
  // A record cut in half loaded as garbage: LibTorch sizes the storage from the pickle and reads past the record.
  expectOneLineError(kiln({"compile", shorter, "--ir", "loop"}), 1,
                     {shorter, "is damaged: its tensor data records hold 81920 bytes where its tensors' storages need 98304"});
}

// The code's tensor constants (constants.pkl) are read by torch::jit::load itself, whose constant pooling compared a
// 0-dim constant with a storage of 0 elements out of bounds (a segfault, found by fuzzing; the input is in
// fuzz/regressions/pt/). Both a storage too small for its tensor and one larger than its record are one line.
TEST_F(PlainTrace, DamagedConstantTensorIsOneLine) {
  TempDir tmp;
  std::string script = fmt::format(
      "import re, zipfile\n"
      "def damaged(name, elements):\n"
      "    src, out = zipfile.ZipFile('models/fixtures/elementwise.pt'), zipfile.ZipFile('{0}/' + name, 'w')\n"
      "    for n in src.namelist():\n"
      "        b = src.read(n)\n"
      "        if n.endswith('/constants.pkl'):  # the first storage's element count, 1 in the fixture\n"
      "            b, k = re.subn(rb'(cpuq.)K\\x01t', lambda m: m.group(1) + b'K' + bytes([elements]) + b't', b, count=1)\n"
      "            assert k == 1\n"
      "        out.writestr(n, b)\n"
      "    out.close()\n"
      "damaged('none.pt', 0)\n"
      "damaged('two.pt', 2)\n",
      tmp.path.string());
  ASSERT_TRUE(runPython(tmp, script)) << script;
  const std::string none = (tmp.path / "none.pt").string(), two = (tmp.path / "two.pt").string();
  expectOneLineError(kiln({"compile", none, "--ir", "tensor"}), 1,
                     {none, "is damaged: constant tensor 0 of the code (1 elements) needs 8 bytes of its data record, which holds 0"});
  expectOneLineError(kiln({"compile", two, "--ir", "tensor"}), 1,
                     {two, "is damaged: constant tensor 0 of the code has a storage of 16 bytes in a record (constants/0) of 8"});
  Result intact = kiln({"compile", "models/fixtures/elementwise.pt", "--ir", "tensor"});
  EXPECT_EQ(intact.code, 0) << describe(intact);
}

// --input values kiln cannot honour are refused in one line before anything runs: a dtype other than the one the
// model records (an f32 linear fed i64 ran and printed i64 outputs), more elements than kiln addresses (LibTorch
// threw a stack trace), and shapes whose buffers do not fit in memory exit 1 with a hint instead of exit 3.
}  // namespace
}  // namespace kiln
namespace kiln::frontend {
std::string firstLine(const std::string& s);  // src/frontend/torch_util.h: how LibTorch's messages are quoted
}  // namespace kiln::frontend
namespace kiln {
namespace {

// LibTorch messages may start with a newline ("\nArguments for call are not valid..."): kiln quotes the first line
// with text (an archive refused with "... archive ();" before).
TEST(Inputs, LibTorchMessagesAreQuotedByTheirFirstLineWithText) {
  EXPECT_EQ(frontend::firstLine("\nArguments for call are not valid.\nThe following variants"), "Arguments for call are not valid.");
  EXPECT_EQ(frontend::firstLine("one\ntwo"), "one");
  EXPECT_EQ(frontend::firstLine("  \n\t\n"), "no details");
}

TEST(Inputs, ValuesKilnCannotHonourAreOneLine) {
  const std::string mlp = "models/fixtures/mlp.pt";
  expectOneLineError(kiln({"run", mlp, "--interpret", "--input", "x=1x8x64:i64"}), 2,
                     {"--input gives 'x' the dtype i64, but", "records f32 for it; drop ':i64'"});
  expectOneLineError(kiln({"compile", mlp, "--ir", "loop", "--input", "x=9223372036854775807x64"}), 2,
                     {"bad --input 'x=9223372036854775807x64'", "more than 2^31 elements in one input"});
  expectOneLineError(kiln({"compile", mlp, "--input", "x=65536x65536x64"}), 2, {"more than 2^31 elements in one input"});
  Result ok = kiln({"run", mlp, "--interpret", "--input", "x=2x8x64:f32"});
  EXPECT_EQ(ok.code, 0) << describe(ok);
}

TEST(Inspect, RecordedInputsAndFoldedOps) {
  Result r = kiln({"inspect", "models/fixtures/hf_llama_tiny.pt"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "inputs: 1, recorded in kiln_inputs.json")) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  input_ids +i64\[1x16\]\n)"))) << describe(r);
  EXPECT_TRUE(contains(r.out, "buffers: 2 tensors")) << describe(r);
  // The causal-mask chain works on sizes only: evaluated at import, not an op kiln must lower.
  size_t folded = r.out.find("ops on constants and shapes only");
  ASSERT_NE(folded, std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("aten::cumsum", folded), std::string::npos) << describe(r);
  EXPECT_EQ(r.out.find("aten::cumsum"), r.out.find("aten::cumsum", folded)) << describe(r);
  EXPECT_TRUE(contains(r.out, "kiln supports every op on input data")) << describe(r);
}

// --json: the same facts as one object (issue 53 item 7); a decoder step's state and its writes too.
TEST(Inspect, JsonHoldsTheSameFacts) {
  Result r = kiln({"inspect", "models/fixtures/hf_llama_tiny.pt", "--json"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "hf_llama_tiny");
  EXPECT_TRUE(j["inputs_recorded"].get<bool>());
  ASSERT_EQ(j["inputs"].size(), 1u);
  EXPECT_EQ(j["inputs"][0]["name"], "input_ids");
  EXPECT_EQ(j["inputs"][0]["dtype"], "i64");
  EXPECT_EQ(j["inputs"][0]["shape"], (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(j["buffers"]["count"], 2);
  bool cumsumFolded = false;
  for (const auto& op : j["folded_ops"]) cumsumFolded = cumsumFolded || op["op"] == "aten::cumsum";
  EXPECT_TRUE(cumsumFolded) << r.out;
  for (const auto& op : j["ops"]) EXPECT_TRUE(op["supported"].get<bool>()) << op.dump();
  EXPECT_TRUE(j["unsupported"].empty());
  Result step = kiln({"inspect", "models/fixtures/hf_llama_decode_tiny.pt", "--json"});
  ASSERT_EQ(step.code, 0) << describe(step);
  const nlohmann::json d = nlohmann::json::parse(step.out);
  EXPECT_EQ(d["state"].size(), 6u) << "key, value and cumulative_length of 2 layers";
  EXPECT_FALSE(d["state_writes"].empty());
}

TEST(Inspect, MissingFileIsOneLine) {
  expectOneLineError(kiln({"inspect", "models/fixtures/no_such_model.pt"}), 1, {"no_such_model.pt", "not found"});
}

}  // namespace
}  // namespace kiln
