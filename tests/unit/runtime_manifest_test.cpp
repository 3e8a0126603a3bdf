// The manifest reader/writer and the driver-less paths of the runtime; none of these need a GPU.
#include <dlfcn.h>
#include <unistd.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "test_support.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/runtime/manifest.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"

namespace kiln::runtime {
namespace {
using test::TempDir;

namespace fs = std::filesystem;


BufferInfo buffer(int64_t id, std::string name, BufferKind kind, Shape shape, int64_t offset) {
  BufferInfo b;
  b.id = id;
  b.name = std::move(name);
  b.kind = kind;
  b.dtype = DType::F32;
  b.shape = std::move(shape);
  b.bytes = numel(b.shape) * 4;
  b.offset = offset;
  return b;
}

// x[2,16,64] * w[64,64] -> t -> y, laid out back to back (all sizes are multiples of 256).
Manifest sample() {
  Manifest m;
  m.kilnVersion = "0.1.0";
  m.model = "mlp";
  m.arch = "sm_90";
  m.buffers.push_back(buffer(0, "x", BufferKind::Input, {2, 16, 64}, 0));
  m.buffers.push_back(buffer(1, "fc.weight", BufferKind::Weight, {64, 64}, 8192));
  m.buffers.back().weightOffset = 0;
  m.buffers.push_back(buffer(2, "t", BufferKind::Temp, {2, 16, 64}, 8192 + 16384));
  m.buffers.push_back(buffer(3, "y", BufferKind::Output, {2, 16, 64}, 8192 + 16384 + 8192));
  m.arenaBytes = 8192 + 16384 + 8192 + 8192;
  m.inputs = {0};
  m.outputs = {3};
  KernelInfo k0;
  k0.name = k0.entry = "k0_matmul";
  k0.source = "k0_matmul.cu";
  k0.cubin = "k0_matmul.cubin";
  k0.params = {0, 1, 2};
  k0.grid[0] = 64;
  k0.block[0] = 256;
  KernelInfo k1 = k0;
  k1.name = k1.entry = "k1_relu";
  k1.source = "k1_relu.cu";
  k1.cubin = "k1_relu.cubin";
  k1.params = {2, 3};
  k1.sharedBytes = 64 * 1024;
  m.kernels = {k0, k1};
  return m;
}

void writeText(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// Expects readManifest(dir) to throw a UserError whose message contains `needle`.
void expectReadError(const fs::path& dir, const std::string& needle) {
  try {
    readManifest(dir);
    ADD_FAILURE() << "expected UserError containing '" << needle << "'";
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("manifest.json"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message must be one line: " << msg;
  }
}

TEST(RuntimeManifest, RoundTrip) {
  TempDir dir;
  Manifest m = sample();
  writeManifest(m, dir.path);
  Manifest r = readManifest(dir.path);
  EXPECT_EQ(toJson(r), toJson(m));
  ASSERT_EQ(r.buffers.size(), 4u);
  EXPECT_EQ(r.buffers[1].name, "fc.weight");
  EXPECT_EQ(r.buffers[1].kind, BufferKind::Weight);
  EXPECT_EQ(r.buffers[1].weightOffset, 0);
  EXPECT_EQ(r.buffers[3].shape, (Shape{2, 16, 64}));
  EXPECT_EQ(r.kernels[1].params, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.kernels[1].sharedBytes, 64 * 1024);
  EXPECT_EQ(r.kernels[0].grid[0], 64);
  EXPECT_EQ(r.kernels[0].block[0], 256);
  EXPECT_EQ(r.weightsFile, "weights.bin");
  // The file uses the documented field names.
  auto j = nlohmann::json::parse(std::ifstream(dir.path / "manifest.json"));
  EXPECT_EQ(j["buffers"][1]["weight_offset"], 0);
  EXPECT_EQ(j["kernels"][1]["shared_bytes"], 64 * 1024);
  EXPECT_FALSE(j["buffers"][0].contains("weight_offset"));
}

// The format version: written, read back; absent (kiln before it had one) means format 1, refused since format 8 (it
// lists no file hashes); a newer one is refused.
TEST(RuntimeManifest, FormatVersion) {
  TempDir dir;
  writeManifest(sample(), dir.path);
  auto j = nlohmann::json::parse(std::ifstream(dir.path / "manifest.json"));
  EXPECT_EQ(j["format_version"], kManifestFormatVersion);
  j.erase("format_version");
  j.erase("manifest_hash");
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "a manifest of format 1 (no format_version: kiln before 2026-12-02) lists no hashes of its "
                            "files, so nothing vouches for the cubins it would load; compile the model again");
  j["format_version"] = kManifestFormatVersion + 1;
  j["kiln_version"] = "9.9.9";
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, fmt::format("manifest format {} (kiln 9.9.9) is not one this runtime reads", kManifestFormatVersion + 1));
  j["format_version"] = "1";
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "format_version");
}

TEST(RuntimeManifest, MissingFile) {
  TempDir dir;
  expectReadError(dir.path, "cannot open");
}

TEST(RuntimeManifest, MalformedJson) {
  TempDir dir;
  writeText(dir.path / "manifest.json", "{\"kiln_version\": \"0.1.0\", ");
  expectReadError(dir.path, "malformed JSON");
}

TEST(RuntimeManifest, MissingAndMistypedFieldsAreNamed) {
  TempDir dir;
  nlohmann::json j = toJson(sample());
  j["kernels"][0].erase("entry");
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "kernels[0].entry");

  j = toJson(sample());
  j["buffers"][2]["dtype"] = "f13";
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "buffers[2].dtype");

  j = toJson(sample());
  j["arena_bytes"] = "big";
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "arena_bytes");
}

TEST(RuntimeManifest, ParamReferencingMissingBufferFailsValidation) {
  Manifest m = sample();
  m.kernels[1].params = {2, 42};
  EXPECT_THROW(validate(m, "test"), UserError);
  TempDir dir;
  writeText(dir.path / "manifest.json", toJson(m).dump());
  expectReadError(dir.path, "buffer id 42");
  EXPECT_THROW(writeManifest(m, dir.path), UserError);  // the writer refuses it too
}

TEST(RuntimeManifest, MemoryPlanIsChecked) {
  Manifest m = sample();
  m.buffers[2].offset += 4;  // unaligned
  EXPECT_THROW(validate(m, "test"), UserError);

  m = sample();
  m.arenaBytes -= 256;  // last buffer sticks out
  EXPECT_THROW(validate(m, "test"), UserError);

  m = sample();
  m.buffers[0].bytes += 4;  // does not match shape * dtype
  EXPECT_THROW(validate(m, "test"), UserError);

  m = sample();
  m.outputs = {2};  // a temp, not an output
  EXPECT_THROW(validate(m, "test"), UserError);

  m = sample();
  m.buffers[3].id = 2;  // duplicate id
  EXPECT_THROW(validate(m, "test"), UserError);

  EXPECT_NO_THROW(validate(sample(), "test"));
}

// A state updated in place: its output shares its input's bytes (in_place_of, format 5). Written and read back; any
// other sharing, or a claim that does not match the input's bytes, is refused in one line.
TEST(RuntimeManifest, AnOutputInPlaceOfItsInputSharesItsBytes) {
  Manifest m = sample();  // y [2,16,64] written over x's bytes
  m.buffers[3].offset = 0;
  m.buffers[3].inPlaceOf = 0;
  EXPECT_NO_THROW(validate(m, "test"));
  TempDir dir;
  writeManifest(m, dir.path);
  EXPECT_EQ(readManifest(dir.path).buffers[3].inPlaceOf, 0);
  auto j = nlohmann::json::parse(std::ifstream(dir.path / "manifest.json"));
  EXPECT_EQ(j["buffers"][3]["in_place_of"], 0);
  EXPECT_FALSE(j["buffers"][0].contains("in_place_of"));
  j["format_version"] = 4;
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "buffers[3].in_place_of in a manifest of format 4");

  Manifest shared = sample();  // the same bytes without the claim: an overlap
  shared.buffers[3].offset = 0;
  EXPECT_THROW(validate(shared, "test"), UserError);
  Manifest elsewhere = sample();  // the claim without the same bytes
  elsewhere.buffers[3].inPlaceOf = 0;
  try {
    validate(elsewhere, "test");
    ADD_FAILURE() << "an output in place of an input at another offset was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is in_place_of 0, which is not an input at its offset"), std::string::npos) << e.what();
  }
  Manifest ofTemp = sample();  // in place of a temporary
  ofTemp.buffers[3].offset = ofTemp.buffers[2].offset;
  ofTemp.buffers[3].inPlaceOf = 2;
  EXPECT_THROW(validate(ofTemp, "test"), UserError);
}

// Hand-edited or hostile manifests: files outside the directory, sizes that overflow, overlapping buffers, inputs
// the caller would never bind, nothing to run. Each is refused in one line naming the field.
TEST(RuntimeManifest, HostileFieldsAreRefused) {
  auto refused = [](Manifest m, const std::string& needle) {
    try {
      validate(m, "m.json");
      ADD_FAILURE() << "expected UserError containing '" << needle << "'";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Manifest m = sample();
  m.weightsFile = "/etc/passwd";
  refused(m, "weights_file \"/etc/passwd\" must name a file in the manifest's directory");
  m = sample();
  m.kernels[0].cubin = "../../k0.cubin";
  refused(m, "kernels[0] ('k0_matmul'): cubin \"../../k0.cubin\" must name a file in the manifest's directory");
  m = sample();
  m.files.push_back(FileInfo{"sub/../../x", 1, 0});
  refused(m, "files[].name \"sub/../../x\"");
  m = sample();
  m.buffers[2].shape = {int64_t{1} << 40, int64_t{1} << 40};
  refused(m, "buffers[2] ('t'): shape [1099511627776, 1099511627776] of f32 has more bytes than a 64-bit size holds");
  m = sample();
  m.buffers[3].offset = m.buffers[2].offset;  // the output on top of the temporary
  refused(m, "buffers 2 ('t') and 3 ('y') overlap in the arena");
  m = sample();
  m.buffers[3].kind = BufferKind::Temp;  // two temporaries may share bytes (a lifetime-based plan)
  m.buffers[3].offset = m.buffers[2].offset;
  m.outputs = {};
  refused(m, "the model has no outputs");
  m = sample();
  m.buffers[2].kind = BufferKind::Input;  // an input the caller never binds: it would stay uninitialised
  refused(m, "buffer 2 ('t') of kind input must appear once in inputs, not 0 times");
  m = sample();
  m.kernels.clear();
  refused(m, "the model has no kernels");
  // Offsets whose ends overflow a 64-bit size wrapped around the checks (issue 45).
  m = sample();
  m.buffers[1].weightOffset = INT64_MAX - 100;
  refused(m, "buffers[1] ('fc.weight'): weight buffer needs a non-negative weight_offset whose end fits a 64-bit size");
  m = sample();
  m.formatVersion = 3;
  // x is 8192 bytes: one row of 64 f32 from rows 2^27 + 1 with a row stride of 2^37 reaches 2^64 + 256 bytes, which
  // wrapped to 256 and passed; 2^10 rows (a smaller reach that does not wrap) were refused all along.
  m.kernels[0].tensorMaps = {TensorMapInfo{0, 0, (int64_t{1} << 27) + 1, 64, int64_t{1} << 37, 8, 64, false}};
  refused(m, "the view reaches past the 8192 bytes of buffer 'x'");
  m.kernels[0].tensorMaps[0].rows = 1024;
  refused(m, "the view reaches past the 8192 bytes of buffer 'x'");
}

// A value of the wrong type is shown by its size, never dumped: a field nested 75,000 deep overflowed the stack while the
// message was built, 50,000 deep made a 100 KB line; a long string is cut (issue 45).
TEST(RuntimeManifest, NestedAndLongValuesInMessagesAreShort) {
  TempDir dir;
  auto j = toJson(sample());
  std::string text = j.dump();
  const std::string nested = std::string(75000, '[') + std::string(75000, ']');
  const std::string key = "\"arena_bytes\":";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  const size_t end = text.find_first_of(",}", at + key.size());
  writeText(dir.path / "manifest.json", text.substr(0, at + key.size()) + nested + text.substr(end));
  try {
    readManifest(dir.path);
    FAIL() << "a nested arena_bytes was accepted";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("field 'arena_bytes' must be an integer, got an array (1 entries)"), std::string::npos) << message;
    EXPECT_LT(message.size(), 300u);
  }
  j["arena_bytes"] = std::string(5000, 'x');
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "got \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"...");
}

// A FIFO where the manifest belongs blocked the read forever (issue 45): refused without opening it.
TEST(RuntimeManifest, AManifestThatIsAFifoIsRefusedNotWaitedFor) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir.path / "manifest.json").c_str(), 0600), 0);
  expectReadError(dir.path, "the manifest is a FIFO, not a file");
}

// Strings from the file are echoed into the message: a control character in one (found by the fuzzer: a newline in a
// buffer's kind) is shown escaped, so the message stays one line.
TEST(RuntimeManifest, FileBytesInMessagesStayOnOneLine) {
  TempDir dir;
  auto j = toJson(sample());
  j["buffers"][2]["kind"] = "te\nmp";
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "field 'buffers[2].kind' must be one of input|output|weight|temp|counters, got \"te\\x0amp\"");
  j = toJson(sample());
  j["buffers"][0]["name"] = "x\ty";
  j["inputs"] = nlohmann::json::array();
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "buffer 0 ('x\\x09y') of kind input must appear once in inputs");
}

// The fingerprints are the FNV authors' FNV-1a (their published 64-bit vectors); kiln's file hash is its step over 8-byte
// words from the same basis. Manifests of formats 2 to 5 hashed their files from a basis a digit short of FNV's: they
// still verify, by the basis of their format, and a file hashed from the other basis does not.
TEST(RuntimeManifest, FilesAreHashedFromFnvsOffsetBasisAndOldFormatsStillVerify) {
  EXPECT_EQ(kiln::fnv1a(kiln::kFnvOffsetBasis, "", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(kiln::fnv1a(kiln::kFnvOffsetBasis, "a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(kiln::fnv1a(kiln::kFnvOffsetBasis, "foobar", 6), 0x85944171f73967e8ull);
  EXPECT_EQ(kiln::fnv1aWords(kiln::kFnvOffsetBasis, "foobar", 6), 0x85944171f73967e8ull) << "fewer than 8 bytes: bytewise";
  TempDir dir;
  writeText(dir.path / "weights.bin", std::string(16384, 'w'));
  Manifest m = sample();
  m.files = {describeFile(dir.path, "weights.bin")};
  writeManifest(m, dir.path);
  EXPECT_NO_THROW(verifyFiles(readManifest(dir.path), dir.path));
  auto j = nlohmann::json::parse(std::ifstream(dir.path / "manifest.json"));
  j["format_version"] = 5;  // the same hash under format 5: taken from the old basis, so it no longer matches
  j.erase("manifest_hash");  // format 8's
  writeText(dir.path / "manifest.json", j.dump());
  EXPECT_THROW(verifyFiles(readManifest(dir.path), dir.path), UserError);
  j["files"][0]["fnv1a_words"] = fmt::format("{:016x}", describeFile(dir.path, "weights.bin", kiln::kFormat5FileHashBasis).fnv1a);
  writeText(dir.path / "manifest.json", j.dump());
  EXPECT_NO_THROW(verifyFiles(readManifest(dir.path), dir.path)) << "a format-5 manifest as kiln wrote it";
}

// Format 2 lists each file's size and hash; verifyFiles notices a truncated, edited or missing file.
TEST(RuntimeManifest, FilesAreCheckedAgainstTheirSizeAndHash) {
  TempDir dir;
  writeText(dir.path / "weights.bin", std::string(16384, 'w'));
  writeText(dir.path / "k0_matmul.cubin", "cubin 0");
  Manifest m = sample();
  m.files = {describeFile(dir.path, "weights.bin"), describeFile(dir.path, "k0_matmul.cubin")};
  EXPECT_EQ(m.files[0].bytes, 16384);
  writeManifest(m, dir.path);
  Manifest r = readManifest(dir.path);
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.files[1].fnv1a, m.files[1].fnv1a);
  EXPECT_NO_THROW(verifyFiles(r, dir.path));
  auto verifyError = [&] {
    try {
      verifyFiles(r, dir.path);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  writeText(dir.path / "k0_matmul.cubin", "cubin 1");  // same size, other bytes
  EXPECT_NE(verifyError().find("k0_matmul.cubin: changed after kiln wrote it (7 bytes"), std::string::npos) << verifyError();
  writeText(dir.path / "k0_matmul.cubin", "cubin");  // truncated
  EXPECT_NE(verifyError().find("k0_matmul.cubin: changed after kiln wrote it (5 bytes"), std::string::npos) << verifyError();
  fs::remove(dir.path / "k0_matmul.cubin");
  EXPECT_NE(verifyError().find("k0_matmul.cubin: missing"), std::string::npos) << verifyError();
  // The Model checks them before it needs a GPU.
  try {
    Model model(dir.path);
    ADD_FAILURE() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("k0_matmul.cubin: missing"), std::string::npos) << e.what();
  }
  auto j = nlohmann::json::parse(std::ifstream(dir.path / "manifest.json"));
  j["files"][0]["fnv1a_words"] = "xyz";
  writeText(dir.path / "manifest.json", j.dump());
  expectReadError(dir.path, "field 'files[0].fnv1a_words' must be 16 hex digits, got \"xyz\"");
}

TEST(Runtime, GpuAvailableWithoutDriverSaysWhy) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  std::string why;
  bool ok = gpuAvailable(&why);
  if (!h) {
    EXPECT_FALSE(ok);
    EXPECT_FALSE(why.empty());
    EXPECT_NE(why.find("libcuda.so.1"), std::string::npos) << why;
  } else {
    dlclose(h);
    EXPECT_EQ(ok, why.empty()) << why;
  }
}

TEST(Runtime, ModelWithoutDriverThrowsUserError) {
  std::string why;
  if (gpuAvailable(&why)) GTEST_SKIP() << "a GPU is present";
  TempDir dir;
  writeManifest(sample(), dir.path);
  try {
    Model model(dir.path);
    ADD_FAILURE() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {

// Format 8: the manifest vouches for itself. A field edited after kiln wrote it (another weight offset, another grid)
// is refused by readManifest as a changed file, before anything is loaded; so is a hash that is not 16 hex digits, and
// the field in an older format.
TEST(RuntimeManifest, TheManifestHashVouchesForItsContents) {
  TempDir dir;
  writeManifest(sample(), dir.path);
  auto j = nlohmann::json::parse(std::ifstream(dir.path / "manifest.json"));
  ASSERT_TRUE(j.contains("manifest_hash"));
  EXPECT_EQ(j["manifest_hash"], fmt::format("{:016x}", manifestHash(j)));
  EXPECT_EQ(readManifest(dir.path).manifestHash, manifestHash(j));
  const auto edited = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& want) {
    nlohmann::json e = j;
    edit(e);
    writeText(dir.path / "manifest.json", e.dump(2));
    expectReadError(dir.path, want);
  };
  const std::string changed = "manifest.json: changed after kiln wrote it (its contents hash to ";
  edited([](nlohmann::json& e) { e["kernels"][0]["grid"] = {1, 1, 1}; }, changed);
  edited([](nlohmann::json& e) { e["buffers"][1]["weight_offset"] = 256; }, changed);
  edited([](nlohmann::json& e) { e["manifest_hash"] = "12345"; }, "field 'manifest_hash' must be 16 hex digits, got \"12345\"");
  edited([](nlohmann::json& e) { e.erase("manifest_hash"); }, "manifest_hash");
  edited([](nlohmann::json& e) { e["format_version"] = 7; }, "'manifest_hash' in a manifest of format 7 (it came with format 8)");
  // Reformatted but unchanged (kiln writes it indented; the hash is of its compact, sorted form): still read.
  writeText(dir.path / "manifest.json", j.dump());
  EXPECT_NO_THROW(readManifest(dir.path));
}

// The files a manifest lists are plain names in its directory, and verifyFiles refuses one that is a symbolic link
// (kiln never writes one; it could lead anywhere).
TEST(RuntimeManifest, FilesAreNamesInTheDirectoryAndNotSymbolicLinks) {
  TempDir dir;
  writeText(dir.path / "real.bin", std::string(16384, 'w'));
  Manifest m = sample();
  m.files = {describeFile(dir.path, "real.bin")};
  m.files[0].name = "weights.bin";
  fs::create_symlink(dir.path / "real.bin", dir.path / "weights.bin");
  writeManifest(m, dir.path);
  try {
    verifyFiles(readManifest(dir.path), dir.path);
    ADD_FAILURE() << "a symbolic link was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("weights.bin: a symbolic link, which kiln never writes"), std::string::npos) << e.what();
  }
  // A kernel binding nothing, an input of no elements: nothing kiln writes.
  Manifest noParams = sample();
  noParams.kernels[1].params.clear();
  EXPECT_THROW(validate(noParams, "m.json"), UserError);
  Manifest empty = sample();
  empty.buffers[0].shape = {2, 0, 64};
  empty.buffers[0].bytes = 0;
  try {
    validate(empty, "m.json");
    ADD_FAILURE() << "an empty input was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("input buffer 0 ('x') has no elements (shape [2, 0, 64])"), std::string::npos) << e.what();
  }
  for (const char* name : {"sub/weights.bin", "..", "."}) {
    Manifest bad = sample();
    bad.weightsFile = name;
    try {
      validate(bad, "m.json");
      ADD_FAILURE() << "accepted weights_file " << name;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("must name a file in the manifest's directory (a name without '/')"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln::runtime
