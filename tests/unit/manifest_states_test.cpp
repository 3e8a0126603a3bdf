// A manifest's states and decode interface (format 7): what `kiln generate DIR` reads of a decoder step instead of its
// trace. Written and read back; each inconsistent field refused in one line naming it.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"
#include "test_support.h"

namespace kiln::runtime {
namespace {
using test::TempDir;
namespace fs = std::filesystem;

BufferInfo buffer(int64_t id, std::string name, BufferKind kind, DType dtype, Shape shape, int64_t offset) {
  BufferInfo b;
  b.id = id;
  b.name = std::move(name);
  b.kind = kind;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.bytes = numel(b.shape) * dtypeBytes(dtype);
  b.offset = offset;
  return b;
}

// A one-token decoder step: ids, pos and a cache in; logits and the cache's new value (in place) out.
Manifest step() {
  Manifest m;
  m.kilnVersion = "0.1.0";
  m.model = "step";
  m.arch = "sm_90";
  m.buffers.push_back(buffer(0, "ids", BufferKind::Input, DType::I64, {1, 1}, 0));
  m.buffers.push_back(buffer(1, "pos", BufferKind::Input, DType::I64, {1}, 256));
  m.buffers.push_back(buffer(2, "cache", BufferKind::Input, DType::F32, {32, 8}, 512));
  m.buffers.push_back(buffer(3, "logits", BufferKind::Output, DType::F32, {1, 1, 16}, 1536));
  m.buffers.push_back(buffer(4, "cache_new", BufferKind::Output, DType::F32, {32, 8}, 512));
  m.buffers.back().inPlaceOf = 2;
  m.arenaBytes = 1792;
  m.inputs = {0, 1, 2};
  m.outputs = {3, 4};
  KernelInfo k;
  k.name = k.entry = "k0_step";
  k.source = "k0_step.cu";
  k.cubin = "k0_step.cubin";
  k.params = {0, 1, 2, 3};
  m.kernels = {k};
  m.states = {StateInfo{"cache", 2, 4, 0}};
  m.decode = DecodeInfo{0, 1, 32, 16};
  return m;
}

// validate() of `m` changed by `change` throws one line holding `needle`.
void expectRefused(const std::function<void(Manifest&)>& change, const std::string& needle) {
  Manifest m = step();
  change(m);
  try {
    validate(m, "manifest.json");
    ADD_FAILURE() << "accepted; expected an error holding '" << needle << "'";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(ManifestStates, AreWrittenAndReadBack) {
  TempDir dir;
  writeManifest(step(), dir.path);
  const Manifest r = readManifest(dir.path);
  ASSERT_EQ(r.states.size(), 1u);
  EXPECT_EQ(r.states[0].name, "cache");
  EXPECT_EQ(r.states[0].input, 2);
  EXPECT_EQ(r.states[0].output, 4);
  EXPECT_EQ(r.states[0].initialOffset, 0);
  ASSERT_TRUE(r.decode.has_value());
  EXPECT_EQ(r.decode->tokenInput, 0);
  EXPECT_EQ(r.decode->positionInput, 1);
  EXPECT_EQ(r.decode->cachePositions, 32);
  EXPECT_EQ(r.decode->vocabulary, 16);
  auto j = nlohmann::json::parse(std::ifstream(dir.path / "manifest.json"));
  EXPECT_EQ(j["format_version"], kManifestFormatVersion);
  EXPECT_EQ(j["states"][0]["initial_offset"], 0);
  EXPECT_EQ(j["decode"]["cache_positions"], 32);
  // A model without state writes neither field.
  Manifest plain = step();
  plain.states.clear();
  plain.decode.reset();
  EXPECT_FALSE(toJson(plain).contains("states"));
  EXPECT_FALSE(toJson(plain).contains("decode"));
  // Format 6 did not have them.
  j["format_version"] = 6;
  j.erase("manifest_hash");  // format 8's
  std::ofstream(dir.path / "manifest.json") << j.dump();
  try {
    readManifest(dir.path);
    ADD_FAILURE() << "states in a format-6 manifest accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'states' in a manifest of format 6"), std::string::npos) << e.what();
  }
}

TEST(ManifestStates, InconsistentFieldsAreRefused) {
  expectRefused([](Manifest& m) { m.states[0].input = 0 + 7; }, "states[0] ('cache').input is buffer id 7");
  expectRefused([](Manifest& m) { m.states[0].output = 2; }, "states[0] ('cache').output is buffer id 2, which is not one "
                                                               "of the manifest's outputs");
  expectRefused([](Manifest& m) { m.states[0].output = 3; }, "differ in dtype or shape");
  expectRefused([](Manifest& m) { m.states[0].initialOffset = -1; }, "initial_offset must be non-negative");
  expectRefused([](Manifest& m) { m.states[0].initialOffset = INT64_MAX; }, "initial_offset");
  expectRefused([](Manifest& m) { m.states.push_back(m.states[0]); }, "another state's too");
  expectRefused([](Manifest& m) { m.decode->tokenInput = 2; }, "decode.token_input is buffer 2 ('cache')");
  expectRefused([](Manifest& m) { m.decode->positionInput = 3; }, "decode.position_input is buffer id 3");
  expectRefused([](Manifest& m) { m.decode->positionInput = 0; }, "are one buffer");
  expectRefused([](Manifest& m) { m.decode->vocabulary = -1; }, "must be >= 0");
}

}  // namespace
}  // namespace kiln::runtime
