// The runtime library against kiln's stub CUDA driver (stub_cuda.cpp, found through LD_LIBRARY_PATH as libcuda.so.1):
// a Model's weights uploaded once and shared by its Sessions and by another entry of its directory, device buffers
// bound in place of the arena (and copied where they may not be), graphs captured once per set of bound addresses,
// sessions run from two threads, and the C API's model and session. The stub runs the tiny "add" and "copy" kernels
// of the directory these tests write, so every result is checked by value.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln_runtime.h"
#include "kiln/kiln_runtime_c.h"
#include "kiln/runtime/manifest.h"
#include "kiln/runtime/runtime.h"
#include "stub_cuda.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using runtime::BufferInfo;
using runtime::BufferKind;

constexpr int64_t kN = 64;  // floats per buffer: 256 bytes, one arena slice each
constexpr size_t kBytes = kN * sizeof(float);

// The stub's counters (its library is the libcuda.so.1 the runtime opened).
struct Stub {
  const kiln_stub_stats* (*stats)() = nullptr;
  void (*reset)() = nullptr;
  size_t (*lastParams)(const char*, uint64_t*, size_t) = nullptr;
  Stub() {
    std::string why;
    EXPECT_TRUE(runtime::gpuAvailable(&why)) << why;  // opens the driver: the stub, through LD_LIBRARY_PATH
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) {
      ADD_FAILURE() << "the stub driver is not loaded; run with LD_LIBRARY_PATH=<build>/stub_cuda";
      return;
    }
    stats = reinterpret_cast<decltype(stats)>(dlsym(lib, "kiln_stub_get_stats"));
    reset = reinterpret_cast<decltype(reset)>(dlsym(lib, "kiln_stub_reset_stats"));
    lastParams = reinterpret_cast<decltype(lastParams)>(dlsym(lib, "kiln_stub_last_params"));
    EXPECT_TRUE(stats && reset && lastParams) << "libcuda.so.1 is not kiln's stub";
  }
  const kiln_stub_stats& now() const { return *stats(); }
  std::vector<uint64_t> params(const char* entry) const {
    std::vector<uint64_t> p(4, 0);
    p.resize(lastParams(entry, p.data(), p.size()));
    return p;
  }
};

const Stub& stub() {
  static Stub s;
  return s;
}

BufferInfo buffer(int64_t id, const char* name, BufferKind kind, int64_t offset) {
  BufferInfo b;
  b.id = id;
  b.name = name;
  b.kind = kind;
  b.shape = {kN};
  b.bytes = kBytes;
  b.offset = offset;
  if (kind == BufferKind::Weight) b.weightOffset = 0;
  return b;
}

runtime::KernelInfo kernel(const char* name, std::vector<int64_t> params) {
  runtime::KernelInfo k;
  k.name = k.entry = name;
  k.source = "stub.cu";
  k.cubin = "stub.cubin";
  k.params = std::move(params);
  return k;
}

// A directory the stub can run: y = x + w (w[i] = i, a weight), through a temporary t: kernels k0 add(x, w, t) and
// k1 copy(t, y). The manifest's arena is x, w, t, y at 0, 256, 512, 768; a session's holds x, t, y (768 bytes).
// `entry` writes another entry of the same directory (k0 and k1 renamed, the same weights); `state` adds a state s
// updated in place, s' = s + w (kernel k2, input and output at arena offset 1024).
fs::path writeDirectory(const std::string& entry = "", bool state = false) {
  // This process's directories, removed when it ends.
  static struct Cleanup {
    fs::path base = fs::temp_directory_path() / ("kiln-stub-" + std::to_string(::getpid()));
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(base, ec);
    }
  } cleanup;
  const fs::path dir = cleanup.base / (state ? "state" : "plain");
  fs::create_directories(dir);
  if (!entry.empty()) writeDirectory("", state);  // the directory's first entry, manifest.json
  const std::string k0 = entry.empty() ? "k0" : "e0", k1 = entry.empty() ? "k1" : "e1";
  std::ofstream(dir / "stub.cubin") << "kiln-stub-cubin\nk0 add 64\nk1 copy 64\nk2 add 64\ne0 add 64\ne1 copy 64\nend\n";
  std::vector<float> w(kN);
  for (int64_t i = 0; i < kN; ++i) w[static_cast<size_t>(i)] = static_cast<float>(i);
  std::ofstream(dir / "weights.bin", std::ios::binary).write(reinterpret_cast<const char*>(w.data()), kBytes);
  runtime::Manifest m;
  m.kilnVersion = "test";
  m.model = "stub";
  m.arch = "sm_90a";
  m.arenaBytes = 1024;
  m.buffers = {buffer(0, "x", BufferKind::Input, 0), buffer(1, "w", BufferKind::Weight, 256),
               buffer(2, "t", BufferKind::Temp, 512), buffer(3, "y", BufferKind::Output, 768)};
  m.inputs = {0};
  m.outputs = {3};
  m.kernels = {kernel(k0.c_str(), {0, 1, 2}), kernel(k1.c_str(), {2, 3})};
  if (state) {
    m.arenaBytes = 1280;
    m.buffers.push_back(buffer(4, "s", BufferKind::Input, 1024));
    m.buffers.push_back(buffer(5, "s_new", BufferKind::Output, 1024));
    m.buffers.back().inPlaceOf = 4;
    m.inputs.push_back(4);
    m.outputs.push_back(5);
    m.kernels.push_back(kernel("k2", {4, 1, 5}));
  }
  m.files = {runtime::describeFile(dir, "weights.bin"), runtime::describeFile(dir, "stub.cubin")};
  runtime::writeManifest(m, dir, entry);
  return dir;
}

// 256-byte aligned memory the stub treats as device memory (its device pointers are host addresses).
struct Memory {
  explicit Memory(size_t bytes) : p(static_cast<float*>(std::aligned_alloc(256, bytes))) {}
  ~Memory() { std::free(p); }
  uint64_t device(size_t offset = 0) const { return reinterpret_cast<uint64_t>(p) + offset; }
  float* p;
};

void expectSum(const float* y, float x, const char* what) {
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(y[i], x + static_cast<float>(i)) << what << " at " << i;
}

TEST(RuntimeSessions, ShareOneUploadOfTheWeights) {
  const fs::path dir = writeDirectory();
  const Stub& s = stub();
  s.reset();
  const uint64_t live = s.now().live_bytes;
  Model model(dir.string());
  EXPECT_EQ(model.info().weightBytes, kBytes);
  EXPECT_EQ(model.info().sessionBytes, 3 * kBytes);
  EXPECT_EQ(s.now().host_to_device_bytes, kBytes);  // the weights, once
  Session a(model), b(model);
  EXPECT_EQ(s.now().host_to_device_bytes, kBytes);
  EXPECT_EQ(s.now().live_bytes - live, kBytes + 2 * 3 * kBytes);  // one copy of the weights, two arenas without them
  std::vector<float> x(kN, 1.0f), ya(kN), yb(kN);
  a.run({Buffer::host(x.data(), kBytes)}, {Buffer::host(ya.data(), kBytes)});
  x.assign(kN, 2.0f);
  b.run({Buffer::host(x.data(), kBytes)}, {Buffer::host(yb.data(), kBytes)});
  expectSum(ya.data(), 1.0f, "session a");
  expectSum(yb.data(), 2.0f, "session b");
  EXPECT_NE(s.params("k0")[2], 0u);
}

TEST(RuntimeSessions, AnotherEntryOfTheDirectorySharesTheWeights) {
  const fs::path dir = writeDirectory("second");
  const Stub& s = stub();
  s.reset();
  auto first = runtime::loadModel(dir);
  auto second = runtime::loadEntry(*first, "second");
  EXPECT_EQ(s.now().host_to_device_bytes, kBytes);
  runtime::Model session(second);
  std::vector<float> x(kN, 3.0f);
  std::vector<std::byte> in(kBytes);
  std::memcpy(in.data(), x.data(), kBytes);
  std::vector<std::vector<std::byte>> out = session.run({in});
  expectSum(reinterpret_cast<const float*>(out.at(0).data()), 3.0f, "the second entry");
  EXPECT_EQ(s.params("e0").at(1), runtime::Model(first).binding(1).device);  // the same weight bytes
}

TEST(RuntimeSessions, ASessionOfAnotherEntrySharesTheModelsWeights) {
  const fs::path dir = writeDirectory("second");
  const Stub& s = stub();
  s.reset();
  Model model(dir.string());
  Session first(model), second(model, "second"), again(model, "second");
  EXPECT_EQ(s.now().host_to_device_bytes, kBytes);
  EXPECT_EQ(second.info().kernels, 2u);
  std::vector<float> x(kN, 4.0f), y(kN);
  second.run({Buffer::host(x.data(), kBytes)}, {Buffer::host(y.data(), kBytes)});
  expectSum(y.data(), 4.0f, "the second entry's session");
  EXPECT_EQ(s.params("e0").size(), 3u);
  try {
    Session missing(model, "nosuch");
    ADD_FAILURE() << "a session of an entry the directory lacks";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("manifest.nosuch.json"), std::string::npos) << e.what();
  }
  kiln_model* c = nullptr;
  kiln_session* cs = nullptr;
  ASSERT_EQ(kiln_model_open(dir.c_str(), 0, &c), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_session_open(c, "second", &cs), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_model_info_inputs(kiln_session_get_info(cs)), 1u);
  kiln_session_close(cs);
  kiln_model_close(c);
}

TEST(RuntimeSessions, DeviceBuffersAreBoundInPlace) {
  const fs::path dir = writeDirectory();
  const Stub& s = stub();
  Runtime rt(dir.string());
  Memory x(kBytes), y(kBytes), y2(kBytes);
  for (int64_t i = 0; i < kN; ++i) x.p[i] = 5.0f;
  s.reset();
  rt.run({Buffer::device(x.device(), kBytes)}, {Buffer::device(y.device(), kBytes)});
  expectSum(y.p, 5.0f, "bound output");
  EXPECT_EQ(s.now().device_to_device_bytes, 0u);  // nothing copied: the kernels used the buffers themselves
  EXPECT_EQ(s.params("k0").at(0), x.device());
  EXPECT_EQ(s.params("k1").at(1), y.device());
  EXPECT_EQ(s.now().captures, 1u);
  // Another output buffer: another graph; the first set's graph is replayed again without a capture.
  rt.run({Buffer::device(x.device(), kBytes)}, {Buffer::device(y2.device(), kBytes)});
  expectSum(y2.p, 5.0f, "second output buffer");
  EXPECT_EQ(s.params("k1").at(1), y2.device());
  rt.run({Buffer::device(x.device(), kBytes)}, {Buffer::device(y.device(), kBytes)});
  EXPECT_EQ(s.now().captures, 2u);
  EXPECT_EQ(s.now().graph_launches, 3u);
  EXPECT_EQ(s.params("k1").at(1), y.device());
  // Launched without a graph, the same addresses.
  RunOptions direct;
  direct.graph = false;
  for (int64_t i = 0; i < kN; ++i) x.p[i] = 6.0f;
  rt.run({Buffer::device(x.device(), kBytes)}, {Buffer::device(y2.device(), kBytes)}, direct);
  expectSum(y2.p, 6.0f, "launched without a graph");
  EXPECT_EQ(s.now().device_to_device_bytes, 0u);
}

TEST(RuntimeSessions, BuffersThatMayNotBeBoundAreCopied) {
  const fs::path dir = writeDirectory();
  const Stub& s = stub();
  Runtime rt(dir.string());
  Memory x(kBytes + 256), y(kBytes);
  float* unaligned = reinterpret_cast<float*>(x.device(16));
  for (int64_t i = 0; i < kN; ++i) unaligned[i] = 7.0f;
  s.reset();
  rt.run({Buffer::device(x.device(16), kBytes)}, {Buffer::device(y.device(), kBytes)});
  expectSum(y.p, 7.0f, "unaligned input");
  EXPECT_EQ(s.now().device_to_device_bytes, kBytes);  // the input, copied into the arena
  EXPECT_NE(s.params("k0").at(0), x.device(16));
  EXPECT_EQ(s.params("k1").at(1), y.device());
  // An output over its own input: both copied, so no kernel writes what another still reads.
  for (int64_t i = 0; i < kN; ++i) y.p[i] = 8.0f;
  s.reset();
  rt.run({Buffer::device(y.device(), kBytes)}, {Buffer::device(y.device(), kBytes)});
  expectSum(y.p, 8.0f, "output over its input");
  EXPECT_EQ(s.now().device_to_device_bytes, 2 * kBytes);
}

TEST(RuntimeSessions, AStateUpdatedInPlaceIsBoundWhereBothItsBindingsAre) {
  const fs::path dir = writeDirectory("", true);
  const Stub& s = stub();
  Session session{Model(dir.string())};
  Memory x(kBytes), y(kBytes), state(kBytes), other(kBytes);
  for (int64_t i = 0; i < kN; ++i) x.p[i] = state.p[i] = 1.0f;
  auto run = [&](uint64_t in, uint64_t out) {
    session.run({Buffer::device(x.device(), kBytes), Buffer::device(in, kBytes)},
                {Buffer::device(y.device(), kBytes), Buffer::device(out, kBytes)});
  };
  s.reset();
  run(state.device(), state.device());
  run(state.device(), state.device());
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(state.p[i], 1.0f + 2.0f * static_cast<float>(i)) << i;
  EXPECT_EQ(s.now().device_to_device_bytes, 0u);
  EXPECT_EQ(s.params("k2"), (std::vector<uint64_t>{state.device(), s.params("k0").at(1), state.device()}));
  // Its input and output bound apart: both copied (the kernel writes over what it reads, in the arena).
  run(state.device(), other.device());
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(other.p[i], 1.0f + 3.0f * static_cast<float>(i)) << i;
    ASSERT_EQ(state.p[i], 1.0f + 2.0f * static_cast<float>(i)) << i;
  }
  EXPECT_EQ(s.now().device_to_device_bytes, 2 * kBytes);
  expectSum(y.p, 1.0f, "the forward's own output");
}

TEST(RuntimeSessions, SessionsRunConcurrentlyAndOutliveTheirModel) {
  const fs::path dir = writeDirectory();
  std::vector<Session> sessions;
  {
    Model model(dir.string());
    sessions.emplace_back(model);
    sessions.emplace_back(model);
  }  // the sessions keep what they run on
  auto work = [&](size_t which, float base, int* failures) {
    std::vector<float> x(kN), y(kN);
    for (int r = 0; r < 200; ++r) {
      x.assign(kN, base + static_cast<float>(r));
      sessions[which].run({Buffer::host(x.data(), kBytes)}, {Buffer::host(y.data(), kBytes)});
      for (int64_t i = 0; i < kN; ++i) *failures += y[static_cast<size_t>(i)] != x[0] + static_cast<float>(i);
    }
  };
  int failures[2] = {0, 0};
  std::thread t0(work, 0, 0.0f, &failures[0]), t1(work, 1, 1000.0f, &failures[1]);
  t0.join();
  t1.join();
  EXPECT_EQ(failures[0] + failures[1], 0);
}

TEST(RuntimeSessions, MovedFromObjectsRefuseInOneLine) {
  const fs::path dir = writeDirectory();
  Model model(dir.string());
  Model moved(std::move(model));
  try {
    Session session(model);  // NOLINT(bugprone-use-after-move): what the test is about
    ADD_FAILURE() << "a Session of a moved-from Model";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
  }
  Session session(moved);
  Session other(std::move(session));
  EXPECT_THROW(session.info(), RuntimeError);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(other.info().model, "stub");
}

TEST(RuntimeSessions, TheCApiOpensAModelAndItsSessions) {
  const fs::path dir = writeDirectory();
  kiln_model* model = nullptr;
  ASSERT_EQ(kiln_model_open(dir.c_str(), 0, &model), KILN_OK) << kiln_last_error();
  const kiln_model_info* info = kiln_model_get_info(model);
  EXPECT_EQ(kiln_model_info_weight_bytes(info), kBytes);
  EXPECT_EQ(kiln_model_info_session_bytes(info), 3 * kBytes);
  kiln_session *a = nullptr, *b = nullptr;
  ASSERT_EQ(kiln_session_open(model, nullptr, &a), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_session_open(model, "", &b), KILN_OK) << kiln_last_error();
  kiln_model_close(model);
  std::vector<float> x(kN, 9.0f), y(kN);
  kiln_buffer in{x.data(), 0, kBytes}, out{y.data(), 0, kBytes};
  ASSERT_EQ(kiln_session_run(b, &in, 1, &out, 1, nullptr), KILN_OK) << kiln_last_error();
  expectSum(y.data(), 9.0f, "C session");
  kiln_buffer small{y.data(), 0, 8};
  EXPECT_EQ(kiln_session_run(a, &in, 1, &small, 1, nullptr), KILN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("needs 256 bytes"), std::string::npos) << kiln_last_error();
  EXPECT_EQ(kiln_session_open(nullptr, nullptr, &a), KILN_INVALID_ARGUMENT);
  kiln_session_close(a);
  kiln_session_close(b);
}

// `kiln run DIR` on the stub: the GPU path of the command (Model::run with its poisoning, --save-io, --bench's timings
// with -v, --profile) end to end; the outputs it saved are x + w of the inputs it saved.
TEST(RuntimeSessions, KilnRunTakesTheGpuPathOnTheStub) {
  const fs::path dir = writeDirectory();
  const fs::path io = dir.parent_path() / "io", log = dir.parent_path() / "run.log";
  const std::string cmd = std::string(KILN_BINARY) + " run " + dir.string() + " --save-io " + io.string() +
                          " --bench 3 --rotate-mb 1 -v --profile > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("kiln stub GPU"), std::string::npos) << out;
  EXPECT_NE(out.find("ms per forward through the runtime's forward()"), std::string::npos) << out;
  EXPECT_NE(out.find("copies of the weights and the arena"), std::string::npos) << out;
  EXPECT_NE(out.find("k1"), std::string::npos) << out;  // --profile's line per kernel
  auto read = [](const fs::path& p) {
    std::vector<float> v(kN);
    std::ifstream f(p, std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), kBytes);
    EXPECT_TRUE(f.good()) << p;
    return v;
  };
  const std::vector<float> x = read(io / "input0.bin"), y = read(io / "output0.bin");
  for (int64_t i = 0; i < kN; ++i)
    ASSERT_EQ(y[static_cast<size_t>(i)], x[static_cast<size_t>(i)] + static_cast<float>(i)) << i << "\n" << out;
}

TEST(RuntimeSessions, TimingRotatesCopiesOfTheWeightsToo) {
  const fs::path dir = writeDirectory();
  runtime::Model model(dir);
  const Stub& s = stub();
  s.reset();
  runtime::TimingOptions o;
  o.iters = 4;
  o.rotateBytes = 4 * 1024;
  runtime::Timing t = model.time(o);
  EXPECT_GT(t.sets, 1);
  EXPECT_EQ(t.rotatedBytes, t.sets * 4 * static_cast<int64_t>(kBytes));
  EXPECT_EQ(s.now().device_to_device_bytes, static_cast<uint64_t>(t.sets - 1) * 4 * kBytes);
  EXPECT_NE(s.params("k0").at(1), model.binding(1).device);  // the last forward read a copy of the weights
}

}  // namespace
}  // namespace kiln
