// One emitted directory for a decoder step's two entry points (issue 42): `kiln compile STEP.pt --emit cuda -o DIR
// --prefill-chunk C` writes the decode step (manifest.json) and a prefill chunk of C tokens (manifest.prefill.json),
// every kernel compiled by nvcc, both reading one weights.bin that holds each shared weight once; the manifests record
// the states with their initial values and the decode interface, which `kiln generate DIR` runs from.
#include <gtest/gtest.h>

#include <filesystem>

#include <fstream>

#include "cli_support.h"
#include "kiln/driver/generate.h"
#include "kiln/driver/pipeline.h"
#include "kiln/runtime/manifest.h"
#include "kiln/runtime/runtime.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;
using test::TempDir;
namespace fs = std::filesystem;

const std::string kStep = test::fixturePath("hf_llama_decode_tiny");

const runtime::BufferInfo& bufferNamed(const runtime::Manifest& m, const std::string& name) {
  for (const runtime::BufferInfo& b : m.buffers)
    if (b.name == name) return b;
  throw std::runtime_error("no buffer " + name);
}

TEST(DecodeEntries, TheStepAndAPrefillChunkShareOneDirectoryAndItsWeights) {
  TempDir tmp;
  const fs::path dir = tmp.path / "step";
  Result r = kiln({"compile", kStep, "--emit", "cuda", "-o", dir.string(), "--prefill-chunk", "8"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("prefill chunk of 8 tokens"), std::string::npos) << describe(r);
  const runtime::Manifest step = runtime::readManifest(dir), chunk = runtime::readManifest(dir, "prefill");
  runtime::verifyFiles(step, dir);  // weights.bin and every cubin as written, for both entries
  runtime::verifyFiles(chunk, dir);
  EXPECT_EQ(bufferNamed(step, "ids").shape, (Shape{1, 1}));
  EXPECT_EQ(bufferNamed(chunk, "ids").shape, (Shape{1, 8}));
  EXPECT_EQ(bufferNamed(chunk, "pos").shape, (Shape{8}));
  // Every kernel of both entries compiled by nvcc; the chunk's files named apart from the step's.
  for (const runtime::Manifest* m : {&step, &chunk})
    for (const runtime::KernelInfo& k : m->kernels) {
      EXPECT_TRUE(fs::exists(dir / k.cubin)) << k.cubin;
      EXPECT_TRUE(fs::exists(dir / k.source)) << k.source;
      if (m == &chunk) EXPECT_EQ(k.name.rfind("prefill_", 0), 0u) << k.name;
    }
  // The same state, by name, shape and order, among both entries' inputs.
  std::vector<std::string> stepInputs, chunkInputs;
  for (int64_t id : step.inputs) stepInputs.push_back(step.findBuffer(id)->name);
  for (int64_t id : chunk.inputs) chunkInputs.push_back(chunk.findBuffer(id)->name);
  EXPECT_EQ(stepInputs, chunkInputs);
  EXPECT_EQ(bufferNamed(step, "w.key_cache_0").shape, bufferNamed(chunk, "w.key_cache_0").shape);
  // The step updates every state in place (its new value on the bytes of the current one: the cache stays in the arena
  // between steps); the chunk's cache writes are one-hot products, which read the cache elsewhere than they write.
  const size_t states = 6;  // two layers' key and value caches and position counters
  for (size_t s = 0; s < states; ++s) {
    const runtime::BufferInfo* in = step.findBuffer(step.inputs[step.inputs.size() - states + s]);
    const runtime::BufferInfo* out = step.findBuffer(step.outputs[step.outputs.size() - states + s]);
    EXPECT_EQ(out->inPlaceOf, in->id) << in->name;
    EXPECT_EQ(out->offset, in->offset) << in->name;
    const runtime::BufferInfo* chunkOut = chunk.findBuffer(chunk.outputs[chunk.outputs.size() - states + s]);
    if (in->name.find("cache") != std::string::npos) EXPECT_EQ(chunkOut->inPlaceOf, -1) << in->name;
  }
  // One copy of each weight both entries hold: the chunk's model weights at the step's offsets, and weights.bin smaller
  // than the two entries' weights together.
  int64_t both = 0;
  for (const runtime::Manifest* m : {&step, &chunk})
    for (const runtime::BufferInfo& b : m->buffers)
      if (b.kind == runtime::BufferKind::Weight) both += b.bytes;
  for (const char* name : {"w.model.model.embed_tokens.weight", "w.model.lm_head.weight", "w.model.model.norm.weight"})
    EXPECT_EQ(bufferNamed(step, name).weightOffset, bufferNamed(chunk, name).weightOffset) << name;
  const auto fileBytes = static_cast<int64_t>(fs::file_size(dir / "weights.bin"));
  EXPECT_LT(fileBytes, both * 6 / 10) << "weights.bin " << fileBytes << " bytes; the entries' weights " << both;
  // Written again over itself (the marker lists both manifests), nothing else in the directory.
  r = kiln({"compile", kStep, "--emit", "cuda", "-o", dir.string(), "--prefill-chunk", "8", "--no-nvcc"});
  EXPECT_EQ(r.code, 0) << describe(r);
}

// What the manifests record of the decoder step is what kiln generate reads from the trace itself: the states by name,
// in order, with the archive's values; the token and position inputs; the cache's positions and the vocabulary.
TEST(DecodeEntries, TheManifestsRecordTheStatesAndTheDecodeInterface) {
  TempDir tmp;
  const fs::path dir = tmp.path / "step";
  Result r = kiln({"compile", kStep, "--emit", "cuda", "-o", dir.string(), "--prefill-chunk", "4", "--no-nvcc"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const Compiled traced = compileModel(kStep, {}, {}, "torch");
  const DecodeInterface want = describeDecode(traced.torchIR, "", "");
  ASSERT_EQ(want.stateNames.size(), 6u);
  for (const std::string entry : {"", "prefill"}) {
    const runtime::Manifest m = runtime::readManifest(dir, entry);
    ASSERT_EQ(m.states.size(), want.stateNames.size()) << entry;
    for (size_t i = 0; i < m.states.size(); ++i) {  // the program's last inputs and outputs, pairwise
      EXPECT_EQ(m.states[i].input, m.inputs[m.inputs.size() - m.states.size() + i]) << entry;
      EXPECT_EQ(m.states[i].output, m.outputs[m.outputs.size() - m.states.size() + i]) << entry;
    }
    const DecodeInterface got = describeDecode(m, dir);
    EXPECT_EQ(got.stateNames, want.stateNames) << entry;
    EXPECT_EQ(got.tokenName, "ids");
    EXPECT_EQ(got.positionName, "pos");
    EXPECT_EQ(got.capacity, 32);
    EXPECT_EQ(got.vocabulary, want.vocabulary);
    ASSERT_EQ(got.initialState.size(), want.initialState.size());
    for (size_t i = 0; i < got.initialState.size(); ++i) {
      EXPECT_EQ(got.initialState[i].dtype, want.initialState[i].dtype) << want.stateNames[i];
      EXPECT_EQ(got.initialState[i].shape, want.initialState[i].shape) << want.stateNames[i];
      EXPECT_EQ(got.initialState[i].values, want.initialState[i].values) << want.stateNames[i];
    }
  }
  // A plain --emit cuda of the step is a decoder step too; of a model without state, it records neither.
  r = kiln({"compile", kStep, "--emit", "cuda", "-o", (tmp.path / "plain").string(), "--no-nvcc"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("a decoder step: kiln generate runs it"), std::string::npos) << describe(r);
  EXPECT_TRUE(runtime::readManifest(tmp.path / "plain").decode.has_value());
  r = kiln({"compile", test::fixturePath("mlp"), "--emit", "cuda", "-o", (tmp.path / "mlp").string(), "--no-nvcc"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const runtime::Manifest mlp = runtime::readManifest(tmp.path / "mlp");
  EXPECT_TRUE(mlp.states.empty());
  EXPECT_FALSE(mlp.decode.has_value());
}

// kiln generate DIR: what it cannot do with a directory, in one line each, before anything runs.
TEST(DecodeEntries, GenerateFromADirectoryRefusesInOneLine) {
  TempDir tmp;
  const fs::path dir = tmp.path / "step", mlp = tmp.path / "mlp";
  ASSERT_EQ(kiln({"compile", kStep, "--emit", "cuda", "-o", dir.string(), "--prefill-chunk", "4", "--no-nvcc"}).code, 0);
  ASSERT_EQ(kiln({"compile", test::fixturePath("mlp"), "--emit", "cuda", "-o", mlp.string(), "--no-nvcc"}).code, 0);
  const std::string d = dir.string();
  expectOneLineError(kiln({"generate", d, "--prompt-ids", "1,2", "--interpret"}), 2, {"does not hold", "the .pt"});
  expectOneLineError(kiln({"generate", d, "--prompt-ids", "1,2", "--prefill-chunk", "8"}), 2, {"drop --prefill-chunk"});
  expectOneLineError(kiln({"generate", d, "--prompt-ids", "1,2", "--dtype", "bf16"}), 2, {"compiled with"});
  expectOneLineError(kiln({"generate", mlp.string(), "--prompt-ids", "1,2"}), 1, {"not a decoder step", "--prefill-chunk C"});
  expectOneLineError(kiln({"generate", tmp.path.string(), "--prompt-ids", "1,2"}), 1, {"manifest.json"});
  if (!runtime::gpuAvailable())
    expectOneLineError(kiln({"generate", d, "--prompt-ids", "1,2"}), 1, {"needs a CUDA GPU", "--interpret"});
  // A decoder step compiled at 4 tokens is no decode step.
  const fs::path four = tmp.path / "four";
  ASSERT_EQ(kiln({"compile", kStep, "--input", "ids=1x4:i64", "--input", "pos=4:i64", "--emit", "cuda", "-o", four.string(),
                  "--no-nvcc"}).code, 0);
  expectOneLineError(kiln({"generate", four.string(), "--prompt-ids", "1,2"}), 1, {"takes 4 tokens per forward"});
  // A weights file cut short: the states' initial values are missing, said before any GPU work.
  fs::resize_file(dir / "weights.bin", 1024);
  expectOneLineError(kiln({"generate", d, "--prompt-ids", "1,2"}), 1, {"state 'w.", "lies outside", "weights.bin"});
}

TEST(DecodeEntries, BadRequestsAreOneLine) {
  TempDir tmp;
  const std::string out = (tmp.path / "out").string();
  expectOneLineError(kiln({"compile", kStep, "--prefill-chunk", "8"}), 2, {"--emit cuda"});
  expectOneLineError(kiln({"compile", kStep, "--emit", "cuda", "-o", out, "--prefill-chunk", "1"}), 2, {"at least 2"});
  expectOneLineError(kiln({"compile", kStep, "--emit", "cuda", "-o", out, "--prefill-chunk", "64", "--no-nvcc"}), 1,
                     {"holds 32 positions"});
  expectOneLineError(kiln({"compile", kStep, "--emit", "cuda", "-o", out, "--prefill-chunk", "4", "--input", "ids=1x4:i64"}),
                     2, {"drop --input"});
  expectOneLineError(kiln({"compile", test::fixturePath("mlp"), "--emit", "cuda", "-o", out, "--prefill-chunk", "4"}), 1,
                     {"token ids and their positions"});
  expectOneLineError(kiln({"compile", kStep, "--token-input", "ids"}), 2, {"--prefill-chunk"});
  EXPECT_FALSE(fs::exists(out)) << "nothing written by a refused compile";
  // kiln run: an entry the directory lacks, an entry of a .pt, a name that cannot be a file's.
  Result r = kiln({"compile", kStep, "--emit", "cuda", "-o", out, "--no-nvcc"});
  ASSERT_EQ(r.code, 0) << describe(r);
  expectOneLineError(kiln({"run", out, "--entry", "prefill"}), 1, {"no entry point 'prefill'", "--prefill-chunk"});
  expectOneLineError(kiln({"run", out, "--entry", "../x"}), 2, {"entry '../x'", "a-z"});
  expectOneLineError(kiln({"run", kStep, "--entry", "prefill"}), 2, {"--entry", "not a directory"});
}

}  // namespace
}  // namespace kiln
