// The public runtime API (include/kiln/kiln_runtime.h) over runtime::Model: kiln's own error types become
// kiln::RuntimeError, manifest types become the header's plain structs.
#include "kiln/kiln_runtime.h"

#include <cstdlib>
#include <cstring>

#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

// Runs f, rethrowing whatever kiln's libraries throw as RuntimeError (one line, as they wrote it).
template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const RuntimeError&) {
    throw;
  } catch (const std::exception& e) {
    throw RuntimeError(e.what());
  }
}

ModelInfo infoOf(const runtime::Manifest& m) {
  ModelInfo info;
  info.model = m.model;
  info.kilnVersion = m.kilnVersion;
  info.arch = m.arch;
  info.kernels = m.kernels.size();
  info.arenaBytes = static_cast<size_t>(m.arenaBytes);
  auto tensor = [&](int64_t id) {
    const runtime::BufferInfo& b = *m.findBuffer(id);
    return TensorInfo{b.name, std::string(dtypeName(b.dtype)), b.shape, static_cast<size_t>(b.bytes)};
  };
  for (int64_t id : m.inputs) info.inputs.push_back(tensor(id));
  for (int64_t id : m.outputs) info.outputs.push_back(tensor(id));
  return info;
}

bool syncFromEnvironment() {
  const char* v = std::getenv("KILN_SYNC_EACH_KERNEL");
  return v && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

}  // namespace

ModelInfo describe(const std::string& dir) {
  return guarded([&] { return infoOf(runtime::readManifest(dir)); });
}

struct Runtime::Impl {
  runtime::Model model;
  ModelInfo info;
};

Runtime::Runtime(const std::string& dir) {
  impl_ = guarded([&] {
    runtime::Model model(dir);
    ModelInfo info = infoOf(model.manifest());
    return std::make_unique<Impl>(Impl{std::move(model), std::move(info)});
  });
}

Runtime::~Runtime() = default;
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;

const ModelInfo& Runtime::info() const { return impl_->info; }

std::string Runtime::deviceName() const { return impl_->model.deviceName(); }

void Runtime::run(const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs, const RunOptions& options) {
  guarded([&] {
    std::vector<runtime::Binding> in, out;
    for (const Buffer& b : inputs) in.push_back(runtime::Binding{b.hostPtr, b.devicePtr});
    for (const Buffer& b : outputs) out.push_back(runtime::Binding{b.hostPtr, b.devicePtr});
    runtime::ForwardOptions o;
    o.stream = options.stream;
    o.graph = options.graph;
    o.syncEachKernel = options.syncEachKernel || syncFromEnvironment();
    impl_->model.forward(in, out, o);
  });
}

}  // namespace kiln
