// The public runtime API (include/kiln/kiln_runtime.h) over runtime::Model: kiln's own error types become
// kiln::RuntimeError with an ErrorCode, manifest types become the header's plain structs, and the caller's buffers are
// checked (count, pointers, sizes, names) before the device is touched.
#include "kiln/kiln_runtime.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "bindings.h"
#include "loaded_model.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0.1.0"
#endif

namespace kiln {
namespace runtime {

ErrorCode errorCodeOf(const std::exception& e) {
  if (auto* f = dynamic_cast<const Failure*>(&e)) return f->code;
  if (auto* r = dynamic_cast<const RuntimeError*>(&e)) return r->code();
  if (dynamic_cast<const UserError*>(&e)) return ErrorCode::BadModel;
  return ErrorCode::Internal;
}

namespace {

Binding bindOne(const TensorInfo& t, const Buffer& b, const char* what, size_t i) {
  if ((b.hostPtr == nullptr) == (b.devicePtr == 0))
    fail(ErrorCode::InvalidArgument, "kiln runtime: {} {} ('{}') needs exactly one of a host and a device pointer, got {}",
         what, i, t.name, b.hostPtr ? "both" : "neither");
  if (b.readOnly && std::strcmp(what, "output") == 0)
    fail(ErrorCode::InvalidArgument, "kiln runtime: output {} ('{}') is bound to read-only memory (Buffer::host of a "
         "const pointer); give it writable memory", i, t.name);
  if (b.bytes != Buffer::kUnknownSize && b.bytes < t.bytes)
    fail(ErrorCode::InvalidArgument, "kiln runtime: {} {} ('{}', {} [{}]) needs {} bytes; its buffer holds {}", what, i,
         t.name, t.dtype, fmt::join(t.shape, "x"), t.bytes, b.bytes);
  return Binding{b.hostPtr, b.devicePtr};
}

}  // namespace

RunGuard::RunGuard(std::atomic<bool>& busy) : busy_(busy) {
  if (busy_.exchange(true, std::memory_order_acquire))
    throw Failure(ErrorCode::InvalidArgument,
                  "kiln runtime: run() was called while another run() of the same Runtime is in progress (from another "
                  "thread); a Runtime runs one forward at a time: give each thread its own");
}

std::vector<Binding> bindInOrder(const std::vector<TensorInfo>& tensors, const std::vector<Buffer>& given,
                                 const char* what) {
  if (given.size() != tensors.size())
    fail(ErrorCode::InvalidArgument, "kiln runtime: the model has {} {}s, {} buffers were given", tensors.size(), what,
         given.size());
  std::vector<Binding> out;
  for (size_t i = 0; i < given.size(); ++i) out.push_back(bindOne(tensors[i], given[i], what, i));
  return out;
}

std::vector<Binding> bindByName(const std::vector<TensorInfo>& tensors, const NamedBuffers& given, const char* what) {
  std::map<std::string, size_t> index;
  std::vector<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    index[tensors[i].name] = i;
    names.push_back("'" + tensors[i].name + "'");
  }
  std::vector<const Buffer*> slot(tensors.size(), nullptr);
  for (const auto& [name, buffer] : given) {
    auto it = index.find(name);
    if (it == index.end())
      fail(ErrorCode::InvalidArgument, "kiln runtime: the model has no {} '{}' (its {}s: {})", what, name, what,
           fmt::join(names, ", "));
    if (slot[it->second])
      fail(ErrorCode::InvalidArgument, "kiln runtime: {} '{}' is given twice", what, name);
    slot[it->second] = &buffer;
  }
  std::vector<Binding> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!slot[i]) fail(ErrorCode::InvalidArgument, "kiln runtime: no buffer for {} '{}'", what, tensors[i].name);
    out.push_back(bindOne(tensors[i], *slot[i], what, i));
  }
  return out;
}

}  // namespace runtime

namespace {

// Runs f, rethrowing whatever kiln's libraries throw as RuntimeError (one line, as they wrote it, and its kind).
template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const RuntimeError&) {
    throw;
  } catch (const std::exception& e) {
    throw RuntimeError(e.what(), runtime::errorCodeOf(e));
  }
}

DataType dataTypeOf(DType t) {
  switch (t) {
    case DType::F32: return DataType::F32;
    case DType::BF16: return DataType::BF16;
    case DType::F16: return DataType::F16;
    case DType::I64: return DataType::I64;
    case DType::Bool: return DataType::Bool;
  }
  throw RuntimeError("kiln runtime: a tensor of an unknown element type", ErrorCode::Internal);
}

ModelInfo infoOf(const runtime::Manifest& m) {
  ModelInfo info;
  info.model = m.model;
  info.kilnVersion = m.kilnVersion;
  info.arch = m.arch;
  info.kernels = m.kernels.size();
  info.arenaBytes = static_cast<size_t>(m.arenaBytes);
  std::unordered_map<int64_t, int64_t> offsets;
  int64_t sessionBytes = 0;
  runtime::layOutSession(m, offsets, sessionBytes);
  info.sessionBytes = static_cast<size_t>(std::max<int64_t>(sessionBytes, runtime::kArenaAlignment));
  const bool weights = std::any_of(m.buffers.begin(), m.buffers.end(), [](const runtime::BufferInfo& b) {
    return b.kind == runtime::BufferKind::Weight && b.bytes > 0;
  });
  for (const runtime::FileInfo& f : m.files)  // what DeviceWeights allocates: the weights file's size
    if (weights && f.name == m.weightsFile) info.weightBytes = static_cast<size_t>(f.bytes);
  auto tensor = [&](int64_t id) {
    const runtime::BufferInfo& b = *m.findBuffer(id);
    return TensorInfo{b.name, std::string(dtypeName(b.dtype)), b.shape, static_cast<size_t>(b.bytes), dataTypeOf(b.dtype)};
  };
  for (int64_t id : m.inputs) info.inputs.push_back(tensor(id));
  for (int64_t id : m.outputs) info.outputs.push_back(tensor(id));
  return info;
}

bool syncFromEnvironment() {
  const char* v = std::getenv("KILN_SYNC_EACH_KERNEL");
  return v && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

runtime::ForwardOptions forwardOptions(const RunOptions& options) {
  runtime::ForwardOptions o;
  o.stream = options.stream;
  o.graph = options.graph;
  o.syncEachKernel = options.syncEachKernel || syncFromEnvironment();
  return o;
}

}  // namespace

const char* version() { return KILN_VERSION; }

const char* dataTypeName(DataType type) {
  switch (type) {
    case DataType::F32: return "f32";
    case DataType::BF16: return "bf16";
    case DataType::F16: return "f16";
    case DataType::I64: return "i64";
    case DataType::Bool: return "bool";
  }
  return "unknown";
}

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "invalid-argument";
    case ErrorCode::BadModel: return "bad-model";
    case ErrorCode::NoDevice: return "no-device";
    case ErrorCode::Unsupported: return "unsupported";
    case ErrorCode::Driver: return "driver";
    case ErrorCode::Internal: return "internal";
  }
  return "unknown";
}

ModelInfo describe(const std::string& dir) {
  return guarded([&] { return infoOf(runtime::readManifest(dir)); });
}

// An entry point as its sessions hold it.
struct LoadedEntry {
  std::shared_ptr<const runtime::LoadedModel> loaded;
  ModelInfo info;
};

struct Model::Impl {
  std::shared_ptr<const LoadedEntry> first;  // manifest.json's
  std::mutex mu;                             // Sessions of other entries may be made from several threads
  std::map<std::string, std::shared_ptr<const LoadedEntry>> others;

  std::shared_ptr<const LoadedEntry> entry(const std::string& name) {
    if (name.empty()) return first;
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<const LoadedEntry>& e = others[name];
    if (!e) {
      auto loaded = runtime::loadEntry(*first->loaded, name);
      e = std::make_shared<const LoadedEntry>(LoadedEntry{loaded, infoOf(loaded->m)});
    }
    return e;
  }
};

Model::Model(const std::string& dir, const RuntimeOptions& options) {
  impl_ = guarded([&] {
    auto impl = std::make_shared<Impl>();
    auto loaded = runtime::loadModel(dir, false, "", options.device);
    impl->first = std::make_shared<const LoadedEntry>(LoadedEntry{loaded, infoOf(loaded->m)});
    return impl;
  });
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

Model::Impl& Model::live() const {
  if (!impl_) throw RuntimeError("kiln runtime: this Model was moved from; use the one it was moved to",
                                 ErrorCode::InvalidArgument);
  return *impl_;
}

const ModelInfo& Model::info() const { return live().first->info; }
std::string Model::deviceName() const { return live().first->loaded->device().name; }

struct Session::Impl {
  std::shared_ptr<const LoadedEntry> entry;  // its info, kept as long as the session
  runtime::Model session;
  std::atomic<bool> busy{false};  // inside run() (runtime::RunGuard)
  explicit Impl(std::shared_ptr<const LoadedEntry> e) : entry(std::move(e)), session(entry->loaded) {}

  template <typename Buffers, typename Bind>
  void run(const Buffers& inputs, const Buffers& outputs, const RunOptions& options, Bind bind) {
    guarded([&] {
      runtime::RunGuard guard(busy);
      std::vector<runtime::Binding> in = bind(entry->info.inputs, inputs, "input");
      std::vector<runtime::Binding> out = bind(entry->info.outputs, outputs, "output");
      session.forward(in, out, forwardOptions(options));
    });
  }
};

Session::Session(const Model& model, const std::string& entry) {
  Model::Impl& m = model.live();  // a moved-from Model: RuntimeError
  impl_ = guarded([&] { return std::make_unique<Impl>(m.entry(entry)); });
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Session::Impl& Session::live() const {
  if (!impl_) throw RuntimeError("kiln runtime: this Session was moved from; use the one it was moved to",
                                 ErrorCode::InvalidArgument);
  return *impl_;
}

const ModelInfo& Session::info() const { return live().entry->info; }

void Session::run(const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs, const RunOptions& options) {
  live().run(inputs, outputs, options, runtime::bindInOrder);
}

void Session::run(const NamedBuffers& inputs, const NamedBuffers& outputs, const RunOptions& options) {
  live().run(inputs, outputs, options, runtime::bindByName);
}

struct Runtime::Impl {
  Model model;
  Session session;
  explicit Impl(Model m) : model(std::move(m)), session(model) {}
};

Runtime::Runtime(const std::string& dir, const RuntimeOptions& options)
    : impl_(std::make_unique<Impl>(Model(dir, options))) {}

Runtime::~Runtime() = default;
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;

Runtime::Impl& Runtime::live() const {
  if (!impl_) throw RuntimeError("kiln runtime: this Runtime was moved from; use the one it was moved to",
                                 ErrorCode::InvalidArgument);
  return *impl_;
}

const ModelInfo& Runtime::info() const { return live().model.info(); }

std::string Runtime::deviceName() const { return live().model.deviceName(); }

void Runtime::run(const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs, const RunOptions& options) {
  live().session.run(inputs, outputs, options);
}

void Runtime::run(const NamedBuffers& inputs, const NamedBuffers& outputs, const RunOptions& options) {
  live().session.run(inputs, outputs, options);
}

}  // namespace kiln
