#include "kiln/runtime/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "driver.h"
#include "loaded_model.h"
#include "kiln/support/error.h"

namespace kiln::runtime {
namespace fs = std::filesystem;

namespace {

// One launch's arguments: a device pointer per param, then the kernel's TMA tensor maps (manifest.h TensorMapInfo),
// and the void* array cuLaunchKernel takes, pointing at them (the vectors' storage never moves once built).
struct LaunchArgs {
  std::vector<CUdeviceptr> pointers;
  std::vector<CUtensorMap> maps;  // 64-byte aligned (cuda.h declares the type so)
  std::vector<void*> ptrs;
};

CUtensorMap encodeTensorMap(const TensorMapInfo& t, const BufferInfo& b, CUdeviceptr buffer, const std::string& where) {
  CUtensorMap map;
  const CUtensorMapDataType type = b.dtype == DType::BF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : b.dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                           : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  if (b.dtype != DType::BF16 && b.dtype != DType::F16 && b.dtype != DType::F32)
    userError("kiln runtime: a tensor map{} over buffer '{}' of {} (bf16, f16 or f32 only)", where, b.name, dtypeName(b.dtype));
  const int64_t e = dtypeBytes(b.dtype);
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(t.cols), static_cast<cuuint64_t>(t.rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(t.rowStride * e)};
  cuuint32_t box[2] = {static_cast<cuuint32_t>(t.boxCols), static_cast<cuuint32_t>(t.boxRows)};
  cuuint32_t elementStrides[2] = {1, 1};
  KILN_CU(cuTensorMapEncodeTiled, where, &map, type, 2, reinterpret_cast<void*>(buffer + static_cast<CUdeviceptr>(t.offset * e)), dims,
          strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
          t.swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return map;
}

// Captures what `launches` puts on `stream` into a CUDA graph and instantiates it; a failing launch ends the capture
// and frees the partial graph before rethrowing.
void captureGraph(CUstream stream, const std::function<void()>& launches, CUgraph& graph, CUgraphExec& exec) {
  KILN_CU(cuStreamBeginCapture, " capturing the forward in a CUDA graph", stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  try {
    launches();
  } catch (...) {
    CUgraph partial = nullptr;
    driver().fn_cuStreamEndCapture(stream, &partial);
    if (partial) driver().fn_cuGraphDestroy(partial);
    throw;
  }
  KILN_CU(cuStreamEndCapture, " capturing the forward in a CUDA graph", stream, &graph);
  KILN_CU(cuGraphInstantiate, " instantiating the CUDA graph", &exec, graph, 0ULL);
}

}  // namespace

bool gpuAvailable(std::string* why) {
  try {
    std::string err = initDriver();
    if (why) *why = err;
    return err.empty();
  } catch (const std::exception& e) {  // fmt or allocation failures: still report rather than crash
    if (why) *why = e.what();
    return false;
  }
}

std::string cudaVersions() {
  std::string text = fmt::format("CUDA {}.{} (headers the runtime was built with)", CUDA_VERSION / 1000,
                                 CUDA_VERSION % 1000 / 10);
  std::string why = initDriver();
  int v = 0;
  if (why.empty() && driver().fn_cuDriverGetVersion(&v) == CUDA_SUCCESS)
    return text + fmt::format(", driver {}.{}", v / 1000, v % 1000 / 10);
  return text + ", no driver here: " + why;
}

// The bound addresses of one forward() (buffer id -> the caller's device pointer, by id), the kernel arguments made
// from them and, once captured, their CUDA graph.
struct BoundVariant {
  std::vector<std::pair<int64_t, CUdeviceptr>> bound;
  std::vector<LaunchArgs> args;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  uint64_t lastUse = 0;
};

struct Model::Impl {
  std::shared_ptr<const LoadedModel> loaded;  // first: released after the arena and graphs below
  CUdeviceptr arena = 0;  // this session's: every buffer but the weights (LoadedModel::sessionOffset)
  std::vector<LaunchArgs> args;  // the kernels' arguments over the arena's own bytes, built once
  CUstream ownStream = nullptr;  // where forward() runs when the caller gives none (capture needs a real stream)
  std::vector<BoundVariant> variants;  // forward()'s graphs, at most kMaxGraphs, by bound addresses
  uint64_t clock = 0;

  const Manifest& m() const { return loaded->m; }
  const DeviceContext& device() const { return loaded->device(); }
  void makeCurrent() const { device().makeCurrent(); }
  // Where buffer b lives with the weights at `weights` (the LoadedModel's, or a timing copy) and the session's
  // buffers at `base`.
  CUdeviceptr ptr(const BufferInfo& b, CUdeviceptr weights, CUdeviceptr base) const {
    if (b.kind != BufferKind::Weight) return base + static_cast<CUdeviceptr>(loaded->sessionOffset.at(b.id));
    if (b.weightOffset % kArenaAlignment == 0) return weights + static_cast<CUdeviceptr>(b.weightOffset);
    return loaded->weights->pointer(b);  // its own allocation, never rotated
  }
  CUdeviceptr ptr(const BufferInfo& b) const { return ptr(b, loaded->weights->base(), arena); }
  // Kernel k's arguments, buffer ids found in `bound` taking the address given there.
  LaunchArgs argsOf(const KernelInfo& k, CUdeviceptr weights, CUdeviceptr base,
                    const std::vector<std::pair<int64_t, CUdeviceptr>>& bound = {}) const;
  BoundVariant& variant(const std::vector<std::pair<int64_t, CUdeviceptr>>& bound);

  // A kernel that waits for the grids before it at its entry (KernelInfo::programmaticLaunch) is launched with
  // programmatic stream serialization: it may start while the kernel before it, which allowed that, still runs.
  void launch(size_t i, bool sync, void** args = nullptr, CUstream stream = nullptr) {
    const KernelInfo& k = m().kernels[i];
    std::string where = fmt::format(" for kernel '{}'", k.name);
    void** params = args ? args : this->args[i].ptrs.data();
    CUfunction f = loaded->funcs[i];
    if (k.programmaticLaunch && device().cc >= 90) {
      CUlaunchAttribute overlap{};
      overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      overlap.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig config{};
      config.gridDimX = static_cast<unsigned>(k.grid[0]);
      config.gridDimY = static_cast<unsigned>(k.grid[1]);
      config.gridDimZ = static_cast<unsigned>(k.grid[2]);
      config.blockDimX = static_cast<unsigned>(k.block[0]);
      config.blockDimY = static_cast<unsigned>(k.block[1]);
      config.blockDimZ = static_cast<unsigned>(k.block[2]);
      config.sharedMemBytes = static_cast<unsigned>(k.sharedBytes);
      config.hStream = stream;
      config.attrs = &overlap;
      config.numAttrs = 1;
      KILN_CU(cuLaunchKernelEx, where, &config, f, params, nullptr);
    } else {
      KILN_CU(cuLaunchKernel, where, f, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2],
              static_cast<unsigned>(k.sharedBytes), stream, params, nullptr);
    }
    if (sync) KILN_CU(cuCtxSynchronize, fmt::format(" after kernel '{}'", k.name));
  }

  ~Impl() {
    // Best effort and silent: a destructor must not throw, and after a sticky error these calls fail anyway.
    const Driver& d = driver();
    if (!loaded) return;
    d.fn_cuCtxSetCurrent(device().ctx);
    for (BoundVariant& v : variants) {
      if (v.exec) d.fn_cuGraphExecDestroy(v.exec);
      if (v.graph) d.fn_cuGraphDestroy(v.graph);
    }
    if (ownStream) d.fn_cuStreamDestroy(ownStream);
    if (arena) d.fn_cuMemFree(arena);
  }
};

LaunchArgs Model::Impl::argsOf(const KernelInfo& k, CUdeviceptr weights, CUdeviceptr base,
                               const std::vector<std::pair<int64_t, CUdeviceptr>>& bound) const {
  LaunchArgs a;
  for (int64_t id : k.params) {
    auto it = std::find_if(bound.begin(), bound.end(), [&](const auto& b) { return b.first == id; });
    a.pointers.push_back(it != bound.end() ? it->second : ptr(*m().findBuffer(id), weights, base));
  }
  for (size_t i = 0; i < k.tensorMaps.size(); ++i) {
    const TensorMapInfo& t = k.tensorMaps[i];
    a.maps.push_back(encodeTensorMap(t, *m().findBuffer(k.params[static_cast<size_t>(t.param)]),
                                     a.pointers[static_cast<size_t>(t.param)],
                                     fmt::format(" for tensor map {} of kernel '{}'", i, k.name)));
  }
  for (CUdeviceptr& v : a.pointers) a.ptrs.push_back(&v);
  for (CUtensorMap& t : a.maps) a.ptrs.push_back(&t);
  return a;
}

BoundVariant& Model::Impl::variant(const std::vector<std::pair<int64_t, CUdeviceptr>>& bound) {
  ++clock;
  for (BoundVariant& v : variants)
    if (v.bound == bound) {
      v.lastUse = clock;
      return v;
    }
  if (variants.size() >= kMaxGraphs) {  // the least recently used goes
    auto oldest = std::min_element(variants.begin(), variants.end(),
                                   [](const BoundVariant& a, const BoundVariant& b) { return a.lastUse < b.lastUse; });
    const Driver& d = driver();
    if (oldest->exec) d.fn_cuGraphExecDestroy(oldest->exec);
    if (oldest->graph) d.fn_cuGraphDestroy(oldest->graph);
    variants.erase(oldest);
  }
  BoundVariant& v = variants.emplace_back();
  v.bound = bound;
  v.lastUse = clock;
  for (const KernelInfo& k : m().kernels) v.args.push_back(argsOf(k, loaded->weights->base(), arena, bound));
  return v;
}

Model::Model(std::shared_ptr<const LoadedModel> loaded) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.loaded = std::move(loaded);
  s.makeCurrent();
  const int64_t bytes = std::max<int64_t>(s.loaded->sessionBytes, kArenaAlignment);
  KILN_CU(cuMemAlloc, fmt::format(" allocating the {}-byte arena for '{}'", bytes, s.loaded->dir.string()), &s.arena,
          static_cast<size_t>(bytes));
  KILN_CU(cuMemsetD8, "", s.arena, 0, static_cast<size_t>(bytes));
  for (const KernelInfo& k : s.m().kernels) s.args.push_back(s.argsOf(k, s.loaded->weights->base(), s.arena));
  KILN_CU(cuCtxSynchronize, " after zeroing the arena");
}

Model::Model(const fs::path& dir, bool filesChecked, const std::string& entry, int device)
    : Model(loadModel(dir, filesChecked, entry, device)) {}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const std::shared_ptr<const LoadedModel>& Model::loaded() const { return impl_->loaded; }
int64_t Model::sessionBytes() const { return std::max<int64_t>(impl_->loaded->sessionBytes, kArenaAlignment); }
int64_t Model::weightBytes() const { return impl_->loaded->weights->bytes(); }

std::vector<std::vector<std::byte>> Model::run(const std::vector<std::vector<std::byte>>& inputs) {
  return run(inputs, {});
}

std::vector<std::byte> Model::readBuffer(int64_t bufferId) const {
  const Impl& s = *impl_;
  const BufferInfo* b = s.m().findBuffer(bufferId);
  if (!b) userError("kiln runtime: model '{}' has no buffer {}", s.m().model, bufferId);
  s.makeCurrent();
  std::vector<std::byte> bytes(static_cast<size_t>(b->bytes));
  if (b->bytes > 0) KILN_CU(cuMemcpyDtoH, fmt::format(" reading buffer '{}'", b->name), bytes.data(), s.ptr(*b), bytes.size());
  return bytes;
}

void Model::writeBuffer(int64_t bufferId, const std::vector<std::byte>& bytes) {
  Impl& s = *impl_;
  const BufferInfo* b = s.m().findBuffer(bufferId);
  if (!b || b->kind == BufferKind::Weight || static_cast<int64_t>(bytes.size()) != b->bytes)
    userError("kiln runtime: model '{}' has no arena buffer {} of {} bytes", s.m().model, bufferId, bytes.size());
  s.makeCurrent();
  if (b->bytes > 0) KILN_CU(cuMemcpyHtoD, fmt::format(" writing buffer '{}'", b->name), s.ptr(*b), bytes.data(), bytes.size());
}

std::vector<std::vector<std::byte>> Model::run(const std::vector<std::vector<std::byte>>& inputs,
                                               const std::function<void(size_t kernel)>& afterKernel) {
  Impl& s = *impl_;
  const Manifest& m = s.m();
  if (inputs.size() != m.inputs.size())
    userError("kiln runtime: model '{}' takes {} inputs, got {}", m.model, m.inputs.size(), inputs.size());
  s.makeCurrent();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BufferInfo& b = *m.findBuffer(m.inputs[i]);
    if (static_cast<int64_t>(inputs[i].size()) != b.bytes)
      userError("kiln runtime: input {} ('{}') must be {} bytes ({} {}), got {}", i, b.name, b.bytes,
                dtypeName(b.dtype), shapeString(b.shape), inputs[i].size());
    if (b.bytes > 0)
      KILN_CU(cuMemcpyHtoD, fmt::format(" copying input '{}'", b.name), s.ptr(b), inputs[i].data(), inputs[i].size());
  }
  for (const BufferInfo& b : m.buffers)  // not an output written in place of an input: those bytes hold the input
    if ((b.kind == BufferKind::Output || b.kind == BufferKind::Temp) && b.inPlaceOf < 0 && b.bytes > 0)
      KILN_CU(cuMemsetD8, fmt::format(" poisoning buffer '{}'", b.name), s.ptr(b), 0xFF, static_cast<size_t>(b.bytes));
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    s.launch(i, /*sync=*/true);
    if (afterKernel) afterKernel(i);
  }
  KILN_CU(cuCtxSynchronize, "");
  std::vector<std::vector<std::byte>> out;
  for (int64_t id : m.outputs) {
    const BufferInfo& b = *m.findBuffer(id);
    std::vector<std::byte>& o = out.emplace_back(static_cast<size_t>(b.bytes));
    if (b.bytes > 0) KILN_CU(cuMemcpyDtoH, fmt::format(" copying output '{}'", b.name), o.data(), s.ptr(b), o.size());
  }
  return out;
}

namespace {

using BoundAddresses = std::vector<std::pair<int64_t, CUdeviceptr>>;

// One device binding of a forward() that is not the buffer's own arena bytes.
struct DeviceBinding {
  const BufferInfo* buffer;
  CUdeviceptr address;
  bool output;
};

bool overlap(const DeviceBinding& a, const DeviceBinding& b) {
  return a.address < b.address + static_cast<CUdeviceptr>(b.buffer->bytes) &&
         b.address < a.address + static_cast<CUdeviceptr>(a.buffer->bytes);
}

// Which of `bindings` forward() binds in place of the arena's bytes (Model::forward's rule), by buffer id. What it asks
// of the manifest (the buffers kernels use, the states' partners) was worked out once, at load.
BoundAddresses boundInPlace(const LoadedModel& l, const std::vector<DeviceBinding>& bindings) {
  BoundAddresses bound;
  for (const DeviceBinding& c : bindings) {
    if (c.address % kArenaAlignment != 0 || c.buffer->bytes == 0) continue;
    const auto partner = l.inPlacePartner.find(c.buffer->id);
    const bool hasPartner = partner != l.inPlacePartner.end();
    bool partnerHere = false, clear = true, usedHere = l.usedByKernels.count(c.buffer->id) > 0;
    for (const DeviceBinding& d : bindings) {
      if (&d == &c) continue;
      if (hasPartner && d.buffer->id == partner->second) {
        partnerHere = d.address == c.address;
        usedHere = usedHere || l.usedByKernels.count(d.buffer->id) > 0;
      } else if ((c.output || d.output) && overlap(c, d)) {
        clear = false;
      }
    }
    if (clear && usedHere && hasPartner == partnerHere) bound.push_back({c.buffer->id, c.address});
  }
  std::sort(bound.begin(), bound.end());
  return bound;
}

bool isBound(const BoundAddresses& bound, int64_t id) {
  return std::any_of(bound.begin(), bound.end(), [&](const auto& b) { return b.first == id; });
}

}  // namespace

void Model::forward(const std::vector<Binding>& inputs, const std::vector<Binding>& outputs,
                    const ForwardOptions& o) {
  Impl& s = *impl_;
  const Manifest& m = s.m();
  if (inputs.size() != m.inputs.size() || outputs.size() != m.outputs.size())
    userError("kiln runtime: model '{}' takes {} inputs and {} outputs, got {} and {}", m.model, m.inputs.size(),
              m.outputs.size(), inputs.size(), outputs.size());
  std::vector<DeviceBinding> devices;
  auto checkBinding = [&](const Binding& b, const BufferInfo& info, bool output, size_t i) {
    if ((b.host != nullptr) == (b.device != 0))
      userError("kiln runtime: {} {} ('{}') needs exactly one of a host or a device pointer", output ? "output" : "input",
                i, info.name);
    if (b.device && b.device != s.ptr(info)) devices.push_back(DeviceBinding{&info, b.device, output});
  };
  for (size_t i = 0; i < inputs.size(); ++i) checkBinding(inputs[i], *m.findBuffer(m.inputs[i]), false, i);
  for (size_t i = 0; i < outputs.size(); ++i) checkBinding(outputs[i], *m.findBuffer(m.outputs[i]), true, i);
  const BoundAddresses bound = boundInPlace(*s.loaded, devices);
  s.makeCurrent();
  CUstream stream = static_cast<CUstream>(o.stream);
  if (!stream) {
    if (!s.ownStream) KILN_CU(cuStreamCreate, "", &s.ownStream, CU_STREAM_NON_BLOCKING);
    stream = s.ownStream;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BufferInfo& b = *m.findBuffer(m.inputs[i]);
    if (b.bytes == 0 || inputs[i].device == s.ptr(b) || isBound(bound, b.id)) continue;
    std::string where = fmt::format(" copying input '{}'", b.name);
    if (inputs[i].host)
      KILN_CU(cuMemcpyHtoDAsync, where, s.ptr(b), inputs[i].host, static_cast<size_t>(b.bytes), stream);
    else
      KILN_CU(cuMemcpyDtoDAsync, where, s.ptr(b), inputs[i].device, static_cast<size_t>(b.bytes), stream);
  }
  BoundVariant* v = bound.empty() && !o.graph ? nullptr : &s.variant(bound);
  auto argsOf = [&](size_t i) { return v ? v->args[i].ptrs.data() : nullptr; };
  if (o.syncEachKernel) {
    for (size_t i = 0; i < m.kernels.size(); ++i) {
      s.launch(i, false, argsOf(i), stream);
      KILN_CU(cuStreamSynchronize, fmt::format(" after kernel '{}'", m.kernels[i].name), stream);
    }
  } else if (o.graph) {
    if (!v->exec) {
      captureGraph(stream, [&] {
        for (size_t i = 0; i < m.kernels.size(); ++i) s.launch(i, false, argsOf(i), stream);
      }, v->graph, v->exec);
    }
    KILN_CU(cuGraphLaunch, " replaying the forward's CUDA graph", v->exec, stream);
  } else {
    for (size_t i = 0; i < m.kernels.size(); ++i) s.launch(i, false, argsOf(i), stream);
  }
  bool toHost = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const BufferInfo& b = *m.findBuffer(m.outputs[i]);
    if (b.bytes == 0 || outputs[i].device == s.ptr(b) || isBound(bound, b.id)) continue;
    std::string where = fmt::format(" copying output '{}'", b.name);
    if (outputs[i].host)
      KILN_CU(cuMemcpyDtoHAsync, where, outputs[i].host, s.ptr(b), static_cast<size_t>(b.bytes), stream);
    else
      KILN_CU(cuMemcpyDtoDAsync, where, outputs[i].device, s.ptr(b), static_cast<size_t>(b.bytes), stream);
    toHost = toHost || outputs[i].host;
  }
  // Host buffers are the caller's to read when forward() returns; device outputs are ordered on the stream.
  if (toHost) KILN_CU(cuStreamSynchronize, " after the forward", stream);
}

namespace {

// Everything one timing allocates, released on every path (a failed launch throws).
struct TimingResources {
  std::vector<CUdeviceptr> copies;  // arena copies for rotation
  CUstream stream = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CUevent start = nullptr, stop = nullptr;
  ~TimingResources() {
    const Driver& d = driver();
    if (stream) d.fn_cuStreamSynchronize(stream);
    if (exec) d.fn_cuGraphExecDestroy(exec);
    if (graph) d.fn_cuGraphDestroy(graph);
    if (start) d.fn_cuEventDestroy(start);
    if (stop) d.fn_cuEventDestroy(stop);
    if (stream) d.fn_cuStreamDestroy(stream);
    for (CUdeviceptr p : copies) d.fn_cuMemFree(p);
  }
};

}  // namespace

Timing Model::time(const TimingOptions& o) {
  if (o.iters <= 0 || o.warmup < 0)
    userError("kiln runtime: timing needs iters > 0 and warmup >= 0, got {} and {}", o.iters, o.warmup);
  Impl& s = *impl_;
  const Manifest& m = s.m();
  s.makeCurrent();
  TimingResources r;
  Timing t;
  t.graph = o.graph;

  // Rotation: whole copies of the weights and the arena (inputs, activations), each forward on the next copy, so that
  // no forward finds the previous one's data in L2. At most half of the free memory and 512 copies.
  const int64_t weightBytes = s.loaded->weights->bytes(), setBytes = weightBytes + sessionBytes();
  int64_t sets = 1;
  if (o.rotateBytes > 0) {
    sets = std::clamp<int64_t>((o.rotateBytes + setBytes - 1) / setBytes, 2, 512);
    size_t freeBytes = 0, totalBytes = 0;
    KILN_CU(cuMemGetInfo, "", &freeBytes, &totalBytes);
    sets = std::max<int64_t>(1, std::min<int64_t>(sets, 1 + static_cast<int64_t>(freeBytes / 2) / setBytes));
  }
  std::vector<std::pair<CUdeviceptr, CUdeviceptr>> bases{{s.loaded->weights->base(), s.arena}};  // (weights, arena)
  for (int64_t c = 1; c < sets; ++c) {
    auto copy = [&](CUdeviceptr from, int64_t bytes) {
      CUdeviceptr p = 0;
      if (bytes == 0) return p;
      KILN_CU(cuMemAlloc, fmt::format(" allocating copy {} of {} for timing", c, sets - 1), &p, static_cast<size_t>(bytes));
      r.copies.push_back(p);
      KILN_CU(cuMemcpyDtoD, " copying the weights and the arena for timing", p, from, static_cast<size_t>(bytes));
      return p;
    };
    CUdeviceptr weights = copy(s.loaded->weights->base(), weightBytes);
    bases.push_back({weights, copy(s.arena, sessionBytes())});
  }
  // The copies run on the legacy stream and may still be in flight; a graph replays on a non-blocking stream.
  KILN_CU(cuCtxSynchronize, " after copying the arena for timing");
  t.sets = static_cast<int>(sets);
  t.rotatedBytes = sets > 1 ? sets * setBytes : 0;
  // Kernel arguments per copy: the same offsets from other bases.
  std::vector<std::vector<LaunchArgs>> args(static_cast<size_t>(sets));
  for (int64_t c = 0; c < sets; ++c)
    for (const KernelInfo& k : m.kernels)
      args[static_cast<size_t>(c)].push_back(s.argsOf(k, bases[static_cast<size_t>(c)].first, bases[static_cast<size_t>(c)].second));

  // Capture needs a stream of its own; direct launches use the default stream, as run() does.
  if (o.graph) KILN_CU(cuStreamCreate, "", &r.stream, CU_STREAM_NON_BLOCKING);
  auto forward = [&](int64_t set) {
    for (size_t i = 0; i < m.kernels.size(); ++i)
      s.launch(i, false, args[static_cast<size_t>(set)][i].ptrs.data(), r.stream);
  };
  // One graph holds several forwards, cycling over the copies (a whole number of cycles), and is replayed until at
  // least `iters` forwards ran: as a framework's timing loop captures K iterations in one graph, so that the cost
  // of launching the graph itself (a few microseconds) is spread over them rather than charged to every forward.
  // The graph's kernel nodes stay within kMaxGraphKernels.
  constexpr int64_t kMaxGraphKernels = 4096;
  const int64_t kernels = std::max<int64_t>(1, static_cast<int64_t>(m.kernels.size()));
  const int64_t wanted = std::clamp<int64_t>(std::min<int64_t>(o.iters, kMaxGraphKernels / kernels), 1, o.iters);
  const int64_t perGraph = o.graph ? (wanted + sets - 1) / sets * sets : 1;
  int64_t replays = (o.iters + perGraph - 1) / perGraph, forwards = o.graph ? replays * perGraph : o.iters;
  if (o.graph) {
    captureGraph(r.stream, [&] {
      for (int64_t f = 0; f < perGraph; ++f) forward(f % sets);
    }, r.graph, r.exec);
  }
  auto run = [&](int64_t count) {  // count forwards (graph replays of `perGraph` forwards each)
    if (o.graph) {
      for (int64_t g = 0; g < (count + perGraph - 1) / perGraph; ++g)
        KILN_CU(cuGraphLaunch, " replaying the CUDA graph", r.exec, r.stream);
    } else {
      for (int64_t f = 0; f < count; ++f) forward(f % sets);
    }
  };
  run(std::max<int64_t>(o.warmup, o.graph ? 1 : 0));
  KILN_CU(cuStreamSynchronize, " after warm-up", r.stream);
  KILN_CU(cuEventCreate, "", &r.start, CU_EVENT_DEFAULT);
  KILN_CU(cuEventCreate, "", &r.stop, CU_EVENT_DEFAULT);
  KILN_CU(cuEventRecord, "", r.start, r.stream);
  run(forwards);
  KILN_CU(cuEventRecord, "", r.stop, r.stream);
  KILN_CU(cuEventSynchronize, " while timing", r.stop);
  float ms = 0;
  KILN_CU(cuEventElapsedTime, "", &ms, r.start, r.stop);
  t.forwards = static_cast<int>(forwards);
  t.forwardsPerGraph = static_cast<int>(perGraph);
  t.msPerForward = static_cast<double>(ms) / static_cast<double>(forwards);
  return t;
}

Binding Model::binding(int64_t bufferId) const {
  const BufferInfo* b = impl_->m().findBuffer(bufferId);
  if (!b) userError("kiln runtime: model '{}' has no buffer {}", impl_->m().model, bufferId);
  return Binding{nullptr, impl_->ptr(*b)};
}

double Model::timeForward(int iters) {
  if (iters <= 0) userError("kiln runtime: timing forward() needs iters > 0, got {}", iters);
  Impl& s = *impl_;
  const Manifest& m = s.m();
  s.makeCurrent();
  TimingResources r;  // its `copies` hold the device inputs and outputs, freed on every path
  std::vector<Binding> in, out;
  auto deviceCopy = [&](int64_t id, std::vector<Binding>& to) {
    const BufferInfo& b = *m.findBuffer(id);
    CUdeviceptr p = 0;
    KILN_CU(cuMemAlloc, fmt::format(" allocating a device buffer for '{}'", b.name), &p,
            static_cast<size_t>(std::max<int64_t>(b.bytes, 1)));
    r.copies.push_back(p);
    KILN_CU(cuMemcpyDtoD, "", p, s.ptr(b), static_cast<size_t>(b.bytes));  // the last run()'s values
    to.push_back(Binding{nullptr, p});
  };
  for (int64_t id : m.inputs) deviceCopy(id, in);
  for (int64_t id : m.outputs) deviceCopy(id, out);
  if (!s.ownStream) KILN_CU(cuStreamCreate, "", &s.ownStream, CU_STREAM_NON_BLOCKING);
  ForwardOptions o;  // the defaults: the Model's stream, graph replay
  for (int w = 0; w < 3; ++w) forward(in, out, o);
  KILN_CU(cuEventCreate, "", &r.start, CU_EVENT_DEFAULT);
  KILN_CU(cuEventCreate, "", &r.stop, CU_EVENT_DEFAULT);
  KILN_CU(cuEventRecord, "", r.start, s.ownStream);
  for (int i = 0; i < iters; ++i) forward(in, out, o);
  KILN_CU(cuEventRecord, "", r.stop, s.ownStream);
  KILN_CU(cuEventSynchronize, " while timing forward()", r.stop);
  float ms = 0;
  KILN_CU(cuEventElapsedTime, "", &ms, r.start, r.stop);
  return static_cast<double>(ms) / iters;
}

std::vector<double> Model::timeEachKernel(int launches) {
  if (launches <= 0) userError("kiln runtime: timing each kernel needs launches > 0, got {}", launches);
  Impl& s = *impl_;
  s.makeCurrent();
  TimingResources r;  // events only; launches on the default stream, as run() does
  KILN_CU(cuEventCreate, "", &r.start, CU_EVENT_DEFAULT);
  KILN_CU(cuEventCreate, "", &r.stop, CU_EVENT_DEFAULT);
  std::vector<double> ms(s.m().kernels.size());
  for (size_t i = 0; i < s.m().kernels.size(); ++i) {
    s.launch(i, false);  // warm-up: the module's first launch and the instruction cache
    KILN_CU(cuEventRecord, "", r.start, nullptr);
    for (int l = 0; l < launches; ++l) s.launch(i, false);
    KILN_CU(cuEventRecord, "", r.stop, nullptr);
    KILN_CU(cuEventSynchronize, fmt::format(" while timing kernel '{}'", s.m().kernels[i].name), r.stop);
    float elapsed = 0;
    KILN_CU(cuEventElapsedTime, "", &elapsed, r.start, r.stop);
    ms[i] = static_cast<double>(elapsed) / launches;
  }
  return ms;
}

std::string Model::deviceName() const { return impl_->device().name; }
int Model::computeCapability() const { return impl_->device().cc; }
const Manifest& Model::manifest() const { return impl_->m(); }

}  // namespace kiln::runtime
