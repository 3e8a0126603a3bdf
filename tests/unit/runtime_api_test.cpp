// The public runtime API's checks that need no GPU: bindings (count, pointers, sizes, names) refused in one line before
// the device is touched, error codes, the version, and the C API's describe and failure paths.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "../../src/runtime/bindings.h"
#include "kiln/kiln_runtime.h"
#include "kiln/kiln_runtime_c.h"
#include "kiln/runtime/manifest.h"
#include "test_support.h"

namespace kiln::runtime {
namespace {

std::vector<TensorInfo> twoInputs() {
  return {TensorInfo{"input_ids", "i64", {1, 8}, 64}, TensorInfo{"mask", "bool", {1, 8}, 8}};
}

// Runs f, expecting a Failure with ErrorCode::InvalidArgument whose one-line message holds every needle.
template <typename F>
void expectInvalid(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an InvalidArgument failure";
  } catch (const Failure& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.code, ErrorCode::InvalidArgument) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

TEST(RuntimeApi, BindingsInOrderAreCheckedBeforeTheDevice) {
  int64_t ids[8] = {};
  bool mask[8] = {};
  std::vector<Binding> b = bindInOrder(twoInputs(), {Buffer::host(ids, sizeof ids), Buffer::host(mask, 64)}, "input");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].host, ids);
  EXPECT_EQ(b[1].host, mask);  // larger than the tensor: fine
  expectInvalid([&] { bindInOrder(twoInputs(), {Buffer::host(ids, 4), Buffer::host(mask, 8)}, "input"); },
                {"input 0", "'input_ids'", "i64 [1x8]", "needs 64 bytes", "holds 4"});
  expectInvalid([&] { bindInOrder(twoInputs(), {Buffer::host(ids, 64)}, "input"); }, {"2 inputs", "1 buffers"});
  expectInvalid([&] { bindInOrder(twoInputs(), {Buffer::host(ids, 64), Buffer{mask, 0x1000, 8}}, "input"); },
                {"input 1", "'mask'", "both"});
  expectInvalid([&] { bindInOrder(twoInputs(), {Buffer::host(ids, 64), Buffer{}}, "input"); }, {"neither"});
  // A buffer of unknown size (the deprecated one-argument forms) is the caller's word.
  b = bindInOrder(twoInputs(), {Buffer{ids, 0, Buffer::kUnknownSize}, Buffer::device(0x2000, 8)}, "input");
  EXPECT_EQ(b[1].device, 0x2000u);
}

TEST(RuntimeApi, ReadOnlyMemoryIsNoOutput) {
  const float constant[8] = {};
  float writable[8] = {};
  std::vector<TensorInfo> one{TensorInfo{"y", "f32", {8}, 32}};
  EXPECT_TRUE(Buffer::host(constant, sizeof constant).readOnly);
  EXPECT_FALSE(Buffer::host(writable, sizeof writable).readOnly);
  EXPECT_EQ(bindInOrder(one, {Buffer::host(constant, 32)}, "input")[0].host, constant);  // an input may be const
  expectInvalid([&] { bindInOrder(one, {Buffer::host(constant, 32)}, "output"); }, {"output 0", "'y'", "read-only"});
  EXPECT_EQ(bindInOrder(one, {Buffer::host(writable, 32)}, "output")[0].host, writable);
}

TEST(RuntimeApi, ASecondRunWhileOneIsInsideFails) {
  std::atomic<bool> busy{false};
  {
    RunGuard first(busy);
    EXPECT_TRUE(busy.load());
    expectInvalid([&] { RunGuard second(busy); }, {"another run()", "give each thread its own"});
    EXPECT_TRUE(busy.load());  // the refused one leaves the first's mark
  }
  EXPECT_FALSE(busy.load());
  RunGuard again(busy);  // free again once the first has left
}

TEST(RuntimeApi, BindingsByNameFollowTheModelsOrder) {
  int64_t ids[8] = {};
  bool mask[8] = {};
  std::vector<Binding> b = bindByName(
      twoInputs(), {{"mask", Buffer::host(mask, 8)}, {"input_ids", Buffer::host(ids, 64)}}, "input");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].host, ids);
  EXPECT_EQ(b[1].host, mask);
  expectInvalid([&] { bindByName(twoInputs(), {{"ids", Buffer::host(ids, 64)}}, "input"); },
                {"no input 'ids'", "'input_ids', 'mask'"});
  expectInvalid([&] { bindByName(twoInputs(), {{"input_ids", Buffer::host(ids, 64)}}, "input"); },
                {"no buffer for input 'mask'"});
  expectInvalid([&] {
    bindByName(twoInputs(), {{"mask", Buffer::host(mask, 8)}, {"mask", Buffer::host(mask, 8)}}, "input");
  }, {"'mask' is given twice"});
  expectInvalid([&] {
    bindByName(twoInputs(), {{"mask", Buffer::host(mask, 1)}, {"input_ids", Buffer::host(ids, 64)}}, "input");
  }, {"'mask'", "needs 8 bytes", "holds 1"});
}

TEST(RuntimeApi, ErrorCodesNameTheKindOfFailure) {
  EXPECT_EQ(errorCodeOf(Failure(ErrorCode::Driver, "x")), ErrorCode::Driver);
  EXPECT_EQ(errorCodeOf(Failure(ErrorCode::NoDevice, "x")), ErrorCode::NoDevice);
  EXPECT_EQ(errorCodeOf(UserError("a malformed manifest")), ErrorCode::BadModel);
  EXPECT_EQ(errorCodeOf(std::runtime_error("anything else")), ErrorCode::Internal);
  EXPECT_EQ(errorCodeOf(RuntimeError("x", ErrorCode::Unsupported)), ErrorCode::Unsupported);
  std::set<std::string> names;
  for (ErrorCode c : {ErrorCode::InvalidArgument, ErrorCode::BadModel, ErrorCode::NoDevice, ErrorCode::Unsupported,
                      ErrorCode::Driver, ErrorCode::Internal})
    names.insert(errorCodeName(c));
  EXPECT_EQ(names.size(), 6u);
  EXPECT_STREQ(errorCodeName(ErrorCode::BadModel), "bad-model");
  // A manifest that does not exist: describe() says so with BadModel.
  try {
    describe("/nonexistent/kiln-dir");
    ADD_FAILURE() << "describe of a missing directory succeeded";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.code(), ErrorCode::BadModel) << e.what();
  }
}

TEST(RuntimeApi, VersionIsTheReleases) {
  std::string v = version();
  EXPECT_FALSE(v.empty());
  EXPECT_EQ(v.find_first_not_of("0123456789."), std::string::npos) << v;
  EXPECT_STREQ(kiln_version(), version());
}

// A manifest of one input and one output, as describe() reads it (no files beside it are needed for that).
void writeSmallManifest(const std::filesystem::path& dir) {
  Manifest m;
  m.kilnVersion = "0.1.0";
  m.model = "tiny";
  m.arch = "sm_90a";
  BufferInfo x;
  x.id = 0;
  x.name = "x";
  x.kind = BufferKind::Input;
  x.dtype = DType::F32;
  x.shape = {2, 4};
  x.bytes = 32;
  BufferInfo y = x;
  y.id = 1;
  y.name = "y";
  y.kind = BufferKind::Output;
  y.offset = 256;
  m.buffers = {x, y};
  m.arenaBytes = 512;
  m.inputs = {0};
  m.outputs = {1};
  KernelInfo k;
  k.name = k.entry = "k0_relu";
  k.source = "k0_relu.cu";
  k.cubin = "k0_relu.cubin";
  k.params = {0, 1};
  k.grid[0] = 1;
  k.block[0] = 32;
  m.kernels = {k};
  writeManifest(m, dir);
}

TEST(RuntimeApi, ElementTypesAreAnEnumAndTheirNames) {
  test::TempDir dir;
  writeSmallManifest(dir.path);
  const ModelInfo info = describe(dir.path.string());
  EXPECT_EQ(info.inputs.at(0).type, DataType::F32);
  EXPECT_EQ(info.inputs.at(0).dtype, dataTypeName(DataType::F32));
  EXPECT_STREQ(dataTypeName(DataType::BF16), "bf16");
  EXPECT_STREQ(dataTypeName(DataType::Bool), "bool");
  EXPECT_EQ(static_cast<int>(KILN_BOOL), static_cast<int>(DataType::Bool));
}

TEST(RuntimeApiC, DescribeListsTheTensors) {
  test::TempDir dir;
  writeSmallManifest(dir.path);
  kiln_model_info* info = nullptr;
  ASSERT_EQ(kiln_describe(dir.path.c_str(), &info), KILN_OK) << kiln_last_error();
  EXPECT_STREQ(kiln_model_info_name(info), "tiny");
  EXPECT_STREQ(kiln_model_info_arch(info), "sm_90a");
  ASSERT_EQ(kiln_model_info_inputs(info), 1u);
  ASSERT_EQ(kiln_model_info_outputs(info), 1u);
  kiln_tensor_info t{};
  ASSERT_EQ(kiln_model_info_input(info, 0, &t), KILN_OK);
  EXPECT_STREQ(t.name, "x");
  EXPECT_STREQ(t.dtype, "f32");
  EXPECT_EQ(t.type, KILN_F32);
  ASSERT_EQ(t.rank, 2u);
  EXPECT_EQ(t.shape[0], 2);
  EXPECT_EQ(t.shape[1], 4);
  EXPECT_EQ(t.bytes, 32u);
  ASSERT_EQ(kiln_model_info_output(info, 0, &t), KILN_OK);
  EXPECT_STREQ(t.name, "y");
  EXPECT_EQ(kiln_model_info_output(info, 1, &t), KILN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("1 outputs, no 1"), std::string::npos) << kiln_last_error();
  kiln_model_info_free(info);
}

TEST(RuntimeApiC, FailuresAreStatusesWithOneLine) {
  kiln_model_info* info = reinterpret_cast<kiln_model_info*>(0x1);
  EXPECT_EQ(kiln_describe("/nonexistent/kiln-dir", &info), KILN_BAD_MODEL);
  EXPECT_EQ(info, nullptr);
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find("manifest.json"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_STREQ(kiln_status_name(KILN_BAD_MODEL), "bad-model");
  EXPECT_STREQ(kiln_status_name(KILN_OK), "ok");
  EXPECT_EQ(kiln_describe(nullptr, &info), KILN_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_describe("/tmp", nullptr), KILN_INVALID_ARGUMENT);
  kiln_runtime* rt = reinterpret_cast<kiln_runtime*>(0x1);
  EXPECT_EQ(kiln_runtime_open("/nonexistent/kiln-dir", 0, &rt), KILN_BAD_MODEL);
  EXPECT_EQ(rt, nullptr);
  EXPECT_EQ(kiln_runtime_run(nullptr, nullptr, 0, nullptr, 0, nullptr), KILN_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_runtime_info(nullptr), nullptr);
  kiln_runtime_close(nullptr);
  kiln_model_info_free(nullptr);
  EXPECT_EQ(kiln_model_info_inputs(nullptr), 0u);
}

}  // namespace
}  // namespace kiln::runtime
