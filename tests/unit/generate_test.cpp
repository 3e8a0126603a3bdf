// Model state and `kiln generate` (issue 42): the import of buffers a forward writes in place, the generation loop
// over a scripted entry point, and the command's one-line errors. The comparison with transformers' own generate is
// tests/decode/generate_check.py; the in-place modules below come from Python at test time (skipped without torch).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "cli_support.h"
#include "kiln/driver/generate.h"
#include "kiln/driver/pipeline.h"
#include "kiln/frontend/frontend.h"
#include "kiln/kernel/lower.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;
using test::TempDir;
namespace fs = std::filesystem;

const std::string kStep = test::fixturePath("hf_llama_decode_tiny");

TEST(ModelState, BuffersWrittenInPlaceCloseTheInputsAndOutputs) {
  torch::Graph g = frontend::importModel(kStep, {});
  torch::verify(g);
  ASSERT_EQ(g.states.size(), 6u);  // key, value and cumulative_length of 2 layers
  EXPECT_EQ(g.inputs.size(), 8u);
  EXPECT_EQ(g.outputs.size(), 7u);  // logits, then the states' new values
  for (const torch::State& s : g.states) {
    EXPECT_EQ(g.values[static_cast<size_t>(s.input)].kind, torch::Value::Kind::Input) << s.name;
    EXPECT_NE(s.input, s.output) << s.name;
  }
  const std::string text = torch::print(g);
  EXPECT_TRUE(contains(text, "aten::index_copy(%w.key_cache_0, 2,")) << text;
  EXPECT_TRUE(contains(text, "// state \"w.key_cache_0\"")) << text;
  EXPECT_FALSE(contains(text, "index_copy_")) << text;  // every write is functional
}

TEST(ModelState, CheckComparesTheNewStateWithLibTorchs) {
  Result r = kiln({"run", kStep, "--check", "--interpret"});
  expectCheckPasses(r);
  EXPECT_TRUE(contains(r.out, "output 6: i64[scalar] rel_l2 0.000e+00")) << describe(r);  // a counter, exactly
}

// PipelineOptions::greedyTokens: the step's second output is the argmax of its logits over the vocabulary, i64 [1, T],
// before the states' new values; compiled and run in the interpreter it is the argmax of the first output's rows. A
// forward whose first output is not logits is refused in one line.
TEST(GreedyTokens, TheForwardAlsoReturnsTheArgmaxOfItsLogits) {
  PipelineOptions opts;
  opts.greedyTokens = true;
  Compiled c = compileModel(kStep, {frontend::parseInputOverride("ids=1x3:i64"), frontend::parseInputOverride("pos=3:i64")},
                            opts, "kernel");
  ASSERT_EQ(c.torchIR.outputs.size(), 8u) << "logits, tokens, then the 6 states";
  const torch::Value& tokens = c.torchIR.values[static_cast<size_t>(c.torchIR.outputs[1])];
  EXPECT_EQ(tokens.dtype, DType::I64);
  EXPECT_EQ(tokens.shape, (Shape{1, 3}));
  std::vector<HostTensor> in = test::randomInputs(c.kernelIR, 9);
  in[0].values = {3.f, 1.f, 4.f};
  in[1].values = {0.f, 1.f, 2.f};
  const std::vector<HostTensor> out = kernel::interpret(c.kernelIR, in);
  const int64_t vocabulary = out[0].shape.back();
  for (int64_t t = 0; t < 3; ++t) {
    auto row = out[0].values.begin() + t * vocabulary;
    EXPECT_EQ(out[1].values[static_cast<size_t>(t)], static_cast<float>(std::max_element(row, row + vocabulary) - row)) << "row " << t;
  }
  torch::Graph counts;
  counts.modelName = "counts";
  counts.outputs = {counts.addValue(torch::Value{torch::Value::Kind::Input, "n", DType::I64, {4}, torch::None{}, nullptr})};
  counts.inputs = counts.outputs;
  try {
    torch::appendGreedyToken(counts);
    ADD_FAILURE() << "an i64 first output taken as logits";
  } catch (const UserError& e) {
    EXPECT_TRUE(contains(e.what(), "not logits")) << e.what();
  }
}

// An entry point whose logits favour (last input token + 1) mod 8 and whose one state counts the tokens it has seen,
// recording every call. With `greedy` it also returns greedy tokens (as PipelineOptions::greedyTokens makes a forward do), which favour
// (token + 2) mod 8 so that a test tells which of the two the generator read, and the logits only when asked for.
class ScriptedEntry : public DecodeEntry {
 public:
  ScriptedEntry(int64_t tokens, std::vector<std::vector<float>>* calls, bool greedy = false, std::vector<bool>* asked = nullptr)
      : tokens_(tokens), calls_(calls), greedy_(greedy), asked_(asked) {}
  int64_t tokens() const override { return tokens_; }
  std::vector<HostTensor> run(const std::vector<HostTensor>& in, bool wantLogits) override {
    std::vector<float> record = in[0].values;  // ids, then positions, then the state
    record.insert(record.end(), in[1].values.begin(), in[1].values.end());
    record.push_back(in[2].values[0]);
    calls_->push_back(record);
    if (asked_) asked_->push_back(wantLogits);
    HostTensor logits{DType::F32, {1, tokens_, 8}, std::vector<float>(static_cast<size_t>(tokens_ * 8), 0.f)};
    HostTensor next{DType::I64, {1, tokens_}, std::vector<float>(static_cast<size_t>(tokens_))};
    for (int64_t t = 0; t < tokens_; ++t) {
      const auto id = static_cast<int64_t>(in[0].values[static_cast<size_t>(t)]);
      logits.values[static_cast<size_t>(t * 8 + (id + 1) % 8)] = 1.f;
      next.values[static_cast<size_t>(t)] = static_cast<float>((id + 2) % 8);
    }
    HostTensor seen{DType::I64, {}, {in[2].values[0] + static_cast<float>(tokens_)}};
    if (!greedy_) return {logits, seen};
    if (!wantLogits) logits = HostTensor{DType::F32, {0}, {}};
    return {logits, next, seen};
  }

 private:
  int64_t tokens_;
  std::vector<std::vector<float>>* calls_;
  bool greedy_;
  std::vector<bool>* asked_;
};

DecodeInterface scriptedInterface() {
  DecodeInterface d;
  d.capacity = 16;
  d.vocabulary = 8;
  d.stateNames = {"seen"};
  d.initialState = {HostTensor{DType::I64, {}, {100.f}}};
  return d;
}

TEST(Generator, PrefillChunksArePaddedAndTheStateFedBack) {
  std::vector<std::vector<float>> steps, chunks;
  Generator gen(scriptedInterface(), std::make_unique<ScriptedEntry>(1, &steps), std::make_unique<ScriptedEntry>(4, &chunks));
  std::vector<int64_t> ids = gen.generate({1, 2, 3, 4, 5}, 3);
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 0}));
  // A chunk of 4, then the fifth token: fewer than two left, so through the step; then two decode steps.
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0], (std::vector<float>{1, 2, 3, 4, 0, 1, 2, 3, 100}));
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0], (std::vector<float>{5, 4, 104}));
  EXPECT_EQ(steps[1], (std::vector<float>{6, 5, 105}));
  EXPECT_EQ(steps[2], (std::vector<float>{7, 6, 106}));
  EXPECT_EQ(gen.times().decodeSteps, 2);  // the last new token is never fed back
  EXPECT_GE(gen.times().toFirstToken, 0.0);
  gen.generate({3}, 1);  // a new generation starts from the archive's state
  EXPECT_EQ(steps.back(), (std::vector<float>{3, 0, 100}));
  EXPECT_EQ(gen.times().decodeSteps, 0);
}

// Greedy tokens from the forward (PipelineOptions::greedyTokens): each new token is read from them, not from the logits, and the
// logits are asked for only where someone looks at them (the last prompt forward and each step, with onLogits).
TEST(Generator, GreedyTokensFromTheForwardAreReadAndTheLogitsLeftAlone) {
  std::vector<std::vector<float>> steps, chunks;
  std::vector<bool> stepAsked, chunkAsked;
  DecodeInterface iface = scriptedInterface();
  iface.greedyTokens = true;
  Generator gen(iface, std::make_unique<ScriptedEntry>(1, &steps, true, &stepAsked),
                std::make_unique<ScriptedEntry>(4, &chunks, true, &chunkAsked));
  EXPECT_EQ(gen.generate({1, 2, 3, 4, 5, 6}, 3), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 2, 4})) << "token + 2, not + 1";
  EXPECT_EQ(chunkAsked, (std::vector<bool>{false, false}));
  EXPECT_EQ(stepAsked, (std::vector<bool>{false, false}));
  chunkAsked.clear();
  stepAsked.clear();
  std::vector<std::vector<float>> seen;
  EXPECT_EQ(gen.generate({1, 2, 3, 4, 5, 6}, 3, [&](const std::vector<float>& l) { seen.push_back(l); }),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 2, 4}));
  EXPECT_EQ(chunkAsked, (std::vector<bool>{false, true})) << "only the last prompt forward's logits";
  EXPECT_EQ(stepAsked, (std::vector<bool>{true, true}));
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 1})) << "the logits of the last real token (6)";
}

// The session: prefill, then steps, give what generate gives; a step before a prefill, a token outside the vocabulary
// and a step past the cache are refused in one line with the state and position left as they were.
TEST(Generator, ASessionOfPrefillAndStepsIsGenerate) {
  std::vector<std::vector<float>> steps, chunks;
  Generator gen(scriptedInterface(), std::make_unique<ScriptedEntry>(1, &steps), std::make_unique<ScriptedEntry>(4, &chunks));
  EXPECT_THROW(gen.step(1), UserError);
  EXPECT_EQ(gen.prefill({1, 2, 3, 4, 5}).token, 6);
  EXPECT_EQ(gen.position(), 5);
  EXPECT_EQ(gen.step(6).token, 7);
  EXPECT_EQ(gen.step(7, true).logits, (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(gen.position(), 7);
  const size_t calls = steps.size();
  EXPECT_THROW(gen.step(8), UserError) << "outside the 8 ids";
  EXPECT_EQ(gen.position(), 7);
  for (int64_t p = 7; p < 16; ++p) gen.step(1);
  EXPECT_THROW(gen.step(1), UserError) << "past the cache of 16";
  EXPECT_EQ(gen.position(), 16);
  EXPECT_EQ(steps.size(), calls + 9) << "refused steps run nothing";
  EXPECT_EQ(gen.generate({1, 2, 3, 4, 5}, 3), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 0}));
}

TEST(Generator, ALastChunkIsPaddedWithZerosAtTheFollowingPositions) {
  std::vector<std::vector<float>> steps, chunks;
  Generator gen(scriptedInterface(), std::make_unique<ScriptedEntry>(1, &steps), std::make_unique<ScriptedEntry>(4, &chunks));
  EXPECT_EQ(gen.generate({1, 2, 3, 4, 5, 6}, 1), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));  // chosen from token 6
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[1], (std::vector<float>{5, 6, 0, 0, 4, 5, 6, 7, 104}));
  EXPECT_TRUE(steps.empty());
}

// The same counting state held by the entries themselves (as the GPU entries hold it in shared device buffers): run()
// sees only the ids and the positions, and the state is set once per generation through the step.
class HoldingEntry : public DecodeEntry {
 public:
  HoldingEntry(int64_t tokens, std::shared_ptr<float> seen, std::vector<std::vector<float>>* calls, int* resets)
      : tokens_(tokens), seen_(std::move(seen)), calls_(calls), resets_(resets) {}
  int64_t tokens() const override { return tokens_; }
  bool holdsState() const override { return true; }
  void resetState(const std::vector<HostTensor>& state) override {
    *seen_ = state.at(0).values.at(0);
    ++*resets_;
  }
  std::vector<HostTensor> run(const std::vector<HostTensor>& in, bool /*logits*/) override {
    EXPECT_EQ(in.size(), 2u) << "the state stays with the entry";
    std::vector<float> record = in[0].values;
    record.insert(record.end(), in[1].values.begin(), in[1].values.end());
    record.push_back(*seen_);
    calls_->push_back(record);
    *seen_ += static_cast<float>(tokens_);
    HostTensor logits{DType::F32, {1, tokens_, 8}, std::vector<float>(static_cast<size_t>(tokens_ * 8), 0.f)};
    for (int64_t t = 0; t < tokens_; ++t)
      logits.values[static_cast<size_t>(t * 8 + (static_cast<int64_t>(in[0].values[static_cast<size_t>(t)]) + 1) % 8)] = 1.f;
    return {logits};
  }

 private:
  int64_t tokens_;
  std::shared_ptr<float> seen_;
  std::vector<std::vector<float>>* calls_;
  int* resets_;
};

TEST(Generator, EntriesHoldingTheStateShareItAndGetOnlyTheirInputs) {
  std::vector<std::vector<float>> steps, chunks;
  auto seen = std::make_shared<float>(0.f);
  int resets = 0;
  Generator gen(scriptedInterface(), std::make_unique<HoldingEntry>(1, seen, &steps, &resets),
                std::make_unique<HoldingEntry>(4, seen, &chunks, &resets));
  EXPECT_EQ(gen.generate({1, 2, 3, 4, 5}, 3), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 0}));
  EXPECT_EQ(chunks, (std::vector<std::vector<float>>{{1, 2, 3, 4, 0, 1, 2, 3, 100}}));  // as with the state fed back
  EXPECT_EQ(steps, (std::vector<std::vector<float>>{{5, 4, 104}, {6, 5, 105}, {7, 6, 106}}));
  EXPECT_EQ(resets, 1);  // at construction: the first generation finds the state as the archive has it
  gen.generate({3}, 1);
  EXPECT_EQ(steps.back(), (std::vector<float>{3, 0, 100}));
  EXPECT_EQ(resets, 2);  // the second starts by setting it back
}

TEST(Generator, BadArgumentsLeaveTheStateAsItWas) {
  std::vector<std::vector<float>> steps;
  Generator gen(scriptedInterface(), std::make_unique<ScriptedEntry>(1, &steps), nullptr);
  EXPECT_THROW(gen.generate({1, 8}, 2), UserError);     // outside the vocabulary
  EXPECT_THROW(gen.generate({1, 2, 3}, 15), UserError);  // 17 positions in a cache of 16
  EXPECT_THROW(gen.generate({}, 2), UsageError);
  EXPECT_TRUE(steps.empty());
  EXPECT_EQ(gen.generate({1, 2, 3}, 14).size(), 17u);  // exactly fills the cache: the last token is never fed back
}

TEST(GenerateCommand, PrintsThePromptAndTheNewIdsOnOneLine) {
  Result r = kiln({"generate", kStep, "--interpret", "--prompt-ids", "5,17,42", "--max-new-tokens", "4"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), ','), 6) << describe(r);
  EXPECT_EQ(r.out.rfind("5,17,42,", 0), 0u) << describe(r);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << describe(r);
  Result chunked = kiln({"generate", kStep, "--interpret", "--prompt-ids", "5,17,42", "--max-new-tokens", "4",
                         "--prefill-chunk", "2"});
  EXPECT_EQ(chunked.out, r.out) << describe(chunked);
  // The entries compiled with a pass added and one skipped (an A/B of the step's schedule): the same greedy ids here.
  Result other = kiln({"generate", kStep, "--interpret", "--prompt-ids", "5,17,42", "--max-new-tokens", "4",
                       "--enable-pass", "loop-fuse-norm-products", "--disable-pass", "tile-walk-stages-together"});
  EXPECT_EQ(other.out, r.out) << describe(other);
}

TEST(GenerateCommand, BadInputIsOneLine) {
  expectOneLineError(kiln({"generate", kStep, "--interpret", "--prompt-ids", "5,256"}), 1, {"id 256", "vocabulary of 256"});
  expectOneLineError(kiln({"generate", kStep, "--interpret", "--prompt-ids", "1,2,3", "--max-new-tokens", "31"}), 1,
                     {"33 positions", "the cache holds 32", "max_cache_len"});
  expectOneLineError(kiln({"generate", kStep, "--interpret", "--prompt-ids", "1", "--max-new-tokens", "0"}), 2,
                     {"--max-new-tokens"});
  expectOneLineError(kiln({"generate", kStep, "--interpret", "--prompt-ids", "1", "--token-input", "tokens"}), 2,
                     {"--token-input tokens", "no such argument", "ids, pos"});
  expectOneLineError(kiln({"generate", test::fixturePath("hf_llama_tiny"), "--interpret", "--prompt-ids", "1"}), 1,
                     {"takes 1 argument", "token ids and their positions"});
  expectOneLineError(kiln({"generate", kStep, "--interpret", "--prompt-ids", "1", "--disable-pass", "kernel-lower-from-tile"}), 2,
                     {"--disable-pass kernel-lower-from-tile", "only passes within a level"});
  expectOneLineError(kiln({"generate", kStep, "--interpret", "--prompt-ids", "1", "--enable-pass", "loop-fuse-nothing"}), 2,
                     {"unknown pass 'loop-fuse-nothing'"});
}

TEST(GenerateCommand, SaveLogitsNeverReplacesAUsersFiles) {
  TempDir dir;
  std::ofstream(dir.path / "mine.txt") << "keep";
  expectOneLineError(kiln({"generate", kStep, "--interpret", "--prompt-ids", "1", "--save-logits", dir.path.string()}), 2,
                     {"not a new or empty directory"});
  EXPECT_EQ(readFile(dir.path / "mine.txt"), "keep");
  Result r = kiln({"generate", kStep, "--interpret", "--prompt-ids", "1", "--max-new-tokens", "2", "--save-logits",
                   (dir.path / "logits").string()});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(listDir(dir.path / "logits"), (std::vector<std::string>{"logits0.bin", "logits1.bin"}));
  EXPECT_EQ(fs::file_size(dir.path / "logits" / "logits0.bin"), 256u * 4);
}

// Small modules writing buffers in place, traced at test time.
class InPlaceState : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("python3 -c 'import torch' >/dev/null 2>&1") != 0) return;
    dir_ = std::make_unique<TempDir>();
    std::ofstream(dir_->path / "make.py") << R"(import sys, torch
class Cache(torch.nn.Module):  # index_copy_ along the last dim and along dim 1, a counter, reads after the writes
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.randn(2, 6, 3))
        self.register_buffer("t", torch.randn(2, 3, 6))
        self.register_buffer("n", torch.zeros((), dtype=torch.long))
    def forward(self, x, pos):  # positions c, c + 1 from any c: in range, never repeated (kiln run's inputs are random)
        at = pos.clamp(0, 4) + torch.arange(2)
        self.k.index_copy_(1, at, x)
        self.t.index_copy_(2, at, x.transpose(1, 2))
        self.n.add_(pos.shape[0])
        return self.k.sum(1) + self.t.sum(2) * self.n
class SliceWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.zeros(4))
    def forward(self, x):
        self.b[0:2].add_(x)
        return self.b * 2
class StaleView(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.zeros(4))
    def forward(self, x):
        v = self.b[0:2]
        self.b.add_(1)
        return v * x
out = sys.argv[1]
torch.jit.trace(Cache(), (torch.randn(2, 2, 3), torch.tensor([3]))).save(out + "/cache.pt")
torch.jit.trace(SliceWrite(), (torch.randn(2),), check_trace=False).save(out + "/slice_write.pt")
torch.jit.trace(StaleView(), (torch.randn(2),), check_trace=False).save(out + "/stale_view.pt")
)";
    const std::string cmd = "python3 " + quote((dir_->path / "make.py").string()) + " " + quote(dir_->path.string()) + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) dir_.reset();
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "python3 with torch not available";
  }
  static std::string model(const std::string& name) { return (dir_->path / (name + ".pt")).string(); }
  static std::unique_ptr<TempDir> dir_;
};
std::unique_ptr<TempDir> InPlaceState::dir_;

TEST_F(InPlaceState, IndexCopyAlongAnyDimAndACounterMatchLibTorch) {
  Result r = kiln({"run", model("cache"), "--input", "x=2x2x3", "--input", "pos=1:i64", "--check", "--interpret"});
  expectCheckPasses(r);
  // The output, then the three states in the order the graph first reads them (n, t, k here).
  EXPECT_TRUE(contains(r.out, "output 1: i64[scalar]")) << describe(r);
  EXPECT_TRUE(contains(r.out, "output 2: f32[2x3x6]")) << describe(r);
  EXPECT_TRUE(contains(r.out, "output 3: f32[2x6x3]")) << describe(r);
}

TEST_F(InPlaceState, WritesThroughAViewAreRefused) {
  expectOneLineError(kiln({"compile", model("slice_write"), "--input", "x=2"}), 1,
                     {"aten::add_", "through a view of the model's state 'b'"});
}

TEST_F(InPlaceState, AViewReadAfterAWriteIsRefused) {
  expectOneLineError(kiln({"compile", model("stale_view"), "--input", "x=2"}), 1,
                     {"aten::add_", "state 'b'", "still to be read", "take the view after the write"});
}

}  // namespace
}  // namespace kiln
