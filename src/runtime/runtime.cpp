#include "kiln/runtime/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <utility>

#include "driver.h"
#include "kiln/support/error.h"
#include "kiln/support/files.h"
#include "kiln/support/target.h"

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

// The arguments of kernel k with the arena at `base` (the arena or one of its timing copies).
LaunchArgs launchArgs(const Manifest& m, const KernelInfo& k, CUdeviceptr base) {
  LaunchArgs a;
  for (int64_t id : k.params) a.pointers.push_back(base + static_cast<CUdeviceptr>(m.findBuffer(id)->offset));
  for (size_t i = 0; i < k.tensorMaps.size(); ++i) {
    const TensorMapInfo& t = k.tensorMaps[i];
    a.maps.push_back(encodeTensorMap(t, *m.findBuffer(k.params[static_cast<size_t>(t.param)]),
                                     a.pointers[static_cast<size_t>(t.param)], fmt::format(" for tensor map {} of kernel '{}'", i, k.name)));
  }
  for (CUdeviceptr& v : a.pointers) a.ptrs.push_back(&v);
  for (CUtensorMap& t : a.maps) a.ptrs.push_back(&t);
  return a;
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

std::string quoted(const fs::path& p) { return fmt::format("'{}'", p.string()); }

std::vector<char> readFile(const fs::path& p, const char* what) {
  if (std::string kind = notARegularFile(p.string()); !kind.empty())
    userError("kiln runtime: {} {} is {}, not a file", what, quoted(p), kind);
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  if (!in) userError("kiln runtime: cannot open {} {}", what, quoted(p));
  std::vector<char> data(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  if (!in.read(data.data(), static_cast<std::streamsize>(data.size())))
    userError("kiln runtime: cannot read {} {}", what, quoted(p));
  return data;
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

struct Model::Impl {
  Manifest m;
  fs::path dir;
  int ordinal = 0;  // the device the caller chose
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  std::string name;
  int cc = 0;
  std::map<std::string, CUmodule> modules;  // by cubin file, so kernels sharing a cubin load it once
  std::vector<CUfunction> funcs;            // parallel to m.kernels
  CUdeviceptr arena = 0;
  // Kernel arguments are built once (launchArgs).
  std::vector<LaunchArgs> args;
  // forward(): the kernels captured once as a CUDA graph, replayed on the caller's stream after.
  CUstream ownStream = nullptr;  // where forward() runs when the caller gives none (capture needs a real stream)
  CUgraph graph = nullptr;
  CUgraphExec graphExec = nullptr;

  CUdeviceptr ptr(const BufferInfo& b) const { return arena + static_cast<CUdeviceptr>(b.offset); }
  void makeCurrent() const { KILN_CU(cuCtxSetCurrent, "", ctx); }

  // A kernel that waits for the grids before it at its entry (KernelInfo::programmaticLaunch) is launched with
  // programmatic stream serialization: it may start while the kernel before it, which allowed that, still runs.
  void launch(size_t i, bool sync, void** args = nullptr, CUstream stream = nullptr) {
    const KernelInfo& k = m.kernels[i];
    std::string where = fmt::format(" for kernel '{}'", k.name);
    void** params = args ? args : this->args[i].ptrs.data();
    if (k.programmaticLaunch && cc >= 90) {
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
      KILN_CU(cuLaunchKernelEx, where, &config, funcs[i], params, nullptr);
    } else {
      KILN_CU(cuLaunchKernel, where, funcs[i], k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2],
              static_cast<unsigned>(k.sharedBytes), stream, params, nullptr);
    }
    if (sync) KILN_CU(cuCtxSynchronize, fmt::format(" after kernel '{}'", k.name));
  }

  void load();
  void uploadWeights();

  ~Impl() {
    // Best effort and silent: a destructor must not throw, and after a sticky error these calls fail anyway.
    const Driver& d = driver();
    if (!ctx) return;
    d.fn_cuCtxSetCurrent(ctx);
    if (graphExec) d.fn_cuGraphExecDestroy(graphExec);
    if (graph) d.fn_cuGraphDestroy(graph);
    if (ownStream) d.fn_cuStreamDestroy(ownStream);
    if (arena) d.fn_cuMemFree(arena);
    for (auto& [file, mod] : modules) d.fn_cuModuleUnload(mod);
    d.fn_cuDevicePrimaryCtxRelease(dev);
  }
};

void Model::Impl::load() {
  KILN_CU(cuDeviceGet, "", &dev, ordinal);
  char buf[256] = {};
  KILN_CU(cuDeviceGetName, "", buf, sizeof buf, dev);
  name = buf;
  int major = 0, minor = 0, optin = 0;
  KILN_CU(cuDeviceGetAttribute, "", &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  KILN_CU(cuDeviceGetAttribute, "", &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  KILN_CU(cuDeviceGetAttribute, "", &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  cc = major * 10 + minor;
  KILN_CU(cuDevicePrimaryCtxRetain, "", &ctx, dev);
  makeCurrent();

  // Say so before the driver gives a bare CUDA_ERROR_NO_BINARY_FOR_GPU.
  if (std::string why = archMismatch(m.arch, major, minor); !why.empty())
    fail(ErrorCode::Unsupported, "kiln runtime: {} cannot run on device {} ({}): {}", quoted(dir), ordinal, name, why);

  for (const KernelInfo& k : m.kernels) {
    fs::path file = dir / k.cubin;
    auto it = modules.find(k.cubin);
    if (it == modules.end()) {
      std::vector<char> image = readFile(file, "cubin");
      CUmodule mod = nullptr;
      KILN_CU(cuModuleLoadData, fmt::format(" for {} (kernel '{}')", quoted(file), k.name), &mod, image.data());
      it = modules.emplace(k.cubin, mod).first;
    }
    CUfunction f = nullptr;
    KILN_CU(cuModuleGetFunction, fmt::format(" for entry '{}' of kernel '{}' in {}", k.entry, k.name, quoted(file)),
            &f, it->second, k.entry.c_str());
    if (k.sharedBytes > optin)
      userError("kiln runtime: kernel '{}' needs {} bytes of shared memory per block; {} allows at most {}", k.name,
                k.sharedBytes, name, optin);
    if (k.sharedBytes > Target::kSharedWithoutOptIn)  // above it a kernel must opt in to its dynamic shared memory
      KILN_CU(cuFuncSetAttribute, fmt::format(" for kernel '{}'", k.name), f,
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(k.sharedBytes));
    funcs.push_back(f);
  }

  if (m.arenaBytes > 0) {
    KILN_CU(cuMemAlloc, fmt::format(" allocating the {}-byte arena for {}", m.arenaBytes, quoted(dir)), &arena,
            static_cast<size_t>(m.arenaBytes));
    KILN_CU(cuMemsetD8, "", arena, 0, static_cast<size_t>(m.arenaBytes));
  }
  for (const KernelInfo& k : m.kernels) args.push_back(launchArgs(m, k, arena));
  uploadWeights();
  KILN_CU(cuCtxSynchronize, " after uploading weights");
}

void Model::Impl::uploadWeights() {
  bool any = false;
  for (const BufferInfo& b : m.buffers) any = any || b.kind == BufferKind::Weight;
  if (!any) return;
  fs::path file = dir / m.weightsFile;
  if (std::string kind = notARegularFile(file.string()); !kind.empty())
    userError("kiln runtime: weights file {} is {}, not a file", quoted(file), kind);
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) userError("kiln runtime: cannot open weights file {}", quoted(file));
  const int64_t size = static_cast<int64_t>(in.tellg());
  std::vector<char> chunk;
  for (const BufferInfo& b : m.buffers) {
    if (b.kind != BufferKind::Weight || b.bytes == 0) continue;
    if (b.weightOffset + b.bytes > size)
      userError("kiln runtime: weight '{}' needs bytes [{}, {}) of {}, which has only {} bytes", b.name,
                b.weightOffset, b.weightOffset + b.bytes, quoted(file), size);
    chunk.resize(static_cast<size_t>(b.bytes));
    in.seekg(b.weightOffset);
    if (!in.read(chunk.data(), static_cast<std::streamsize>(b.bytes)))
      userError("kiln runtime: cannot read weight '{}' from {}", b.name, quoted(file));
    KILN_CU(cuMemcpyHtoD, fmt::format(" uploading weight '{}'", b.name), ptr(b), chunk.data(), chunk.size());
  }
}

Model::Model(const fs::path& dir, bool filesChecked, const std::string& entry, int device)
    : impl_(std::make_unique<Impl>()) {
  impl_->m = readManifest(dir, entry);
  if (!filesChecked) verifyFiles(impl_->m, dir);  // weights and cubins as kiln wrote them (format 2 manifests)
  impl_->dir = dir;
  if (std::string why = initDriver(); !why.empty())
    fail(ErrorCode::NoDevice, "kiln runtime: cannot run {} on a GPU: {}", quoted(dir), why);
  int count = 0;
  KILN_CU(cuDeviceGetCount, "", &count);
  if (device < 0 || device >= count)
    fail(ErrorCode::InvalidArgument, "kiln runtime: there is no CUDA device {}: the driver lists {} ({})", device,
         count, count == 1 ? "device 0" : fmt::format("devices 0 to {}", count - 1));
  impl_->ordinal = device;
  impl_->load();
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

std::vector<std::vector<std::byte>> Model::run(const std::vector<std::vector<std::byte>>& inputs) {
  return run(inputs, {});
}

std::vector<std::byte> Model::readBuffer(int64_t bufferId) const {
  const Impl& s = *impl_;
  const BufferInfo* b = s.m.findBuffer(bufferId);
  if (!b) userError("kiln runtime: model '{}' has no buffer {}", s.m.model, bufferId);
  s.makeCurrent();
  std::vector<std::byte> bytes(static_cast<size_t>(b->bytes));
  if (b->bytes > 0) KILN_CU(cuMemcpyDtoH, fmt::format(" reading buffer '{}'", b->name), bytes.data(), s.ptr(*b), bytes.size());
  return bytes;
}

void Model::writeBuffer(int64_t bufferId, const std::vector<std::byte>& bytes) {
  Impl& s = *impl_;
  const BufferInfo* b = s.m.findBuffer(bufferId);
  if (!b || b->kind == BufferKind::Weight || static_cast<int64_t>(bytes.size()) != b->bytes)
    userError("kiln runtime: model '{}' has no arena buffer {} of {} bytes", s.m.model, bufferId, bytes.size());
  s.makeCurrent();
  if (b->bytes > 0) KILN_CU(cuMemcpyHtoD, fmt::format(" writing buffer '{}'", b->name), s.ptr(*b), bytes.data(), bytes.size());
}

std::vector<std::vector<std::byte>> Model::run(const std::vector<std::vector<std::byte>>& inputs,
                                               const std::function<void(size_t kernel)>& afterKernel) {
  Impl& s = *impl_;
  const Manifest& m = s.m;
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

void Model::forward(const std::vector<Binding>& inputs, const std::vector<Binding>& outputs,
                    const ForwardOptions& o) {
  Impl& s = *impl_;
  const Manifest& m = s.m;
  if (inputs.size() != m.inputs.size() || outputs.size() != m.outputs.size())
    userError("kiln runtime: model '{}' takes {} inputs and {} outputs, got {} and {}", m.model, m.inputs.size(),
              m.outputs.size(), inputs.size(), outputs.size());
  auto checkBinding = [&](const Binding& b, const BufferInfo& info, const char* what, size_t i) {
    if ((b.host != nullptr) == (b.device != 0))
      userError("kiln runtime: {} {} ('{}') needs exactly one of a host or a device pointer", what, i, info.name);
  };
  for (size_t i = 0; i < inputs.size(); ++i) checkBinding(inputs[i], *m.findBuffer(m.inputs[i]), "input", i);
  for (size_t i = 0; i < outputs.size(); ++i) checkBinding(outputs[i], *m.findBuffer(m.outputs[i]), "output", i);
  s.makeCurrent();
  CUstream stream = static_cast<CUstream>(o.stream);
  if (!stream) {
    if (!s.ownStream) KILN_CU(cuStreamCreate, "", &s.ownStream, CU_STREAM_NON_BLOCKING);
    stream = s.ownStream;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BufferInfo& b = *m.findBuffer(m.inputs[i]);
    if (b.bytes == 0) continue;
    if (inputs[i].device == s.ptr(b)) continue;  // the buffer's own bytes (binding())
    std::string where = fmt::format(" copying input '{}'", b.name);
    if (inputs[i].host)
      KILN_CU(cuMemcpyHtoDAsync, where, s.ptr(b), inputs[i].host, static_cast<size_t>(b.bytes), stream);
    else
      KILN_CU(cuMemcpyDtoDAsync, where, s.ptr(b), inputs[i].device, static_cast<size_t>(b.bytes), stream);
  }
  if (o.syncEachKernel) {
    for (size_t i = 0; i < m.kernels.size(); ++i) {
      s.launch(i, false, nullptr, stream);
      KILN_CU(cuStreamSynchronize, fmt::format(" after kernel '{}'", m.kernels[i].name), stream);
    }
  } else if (o.graph) {
    if (!s.graphExec) {
      captureGraph(stream, [&] {
        for (size_t i = 0; i < m.kernels.size(); ++i) s.launch(i, false, nullptr, stream);
      }, s.graph, s.graphExec);
    }
    KILN_CU(cuGraphLaunch, " replaying the forward's CUDA graph", s.graphExec, stream);
  } else {
    for (size_t i = 0; i < m.kernels.size(); ++i) s.launch(i, false, nullptr, stream);
  }
  bool toHost = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const BufferInfo& b = *m.findBuffer(m.outputs[i]);
    if (b.bytes == 0) continue;
    if (outputs[i].device == s.ptr(b)) continue;
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
  const Manifest& m = s.m;
  s.makeCurrent();
  TimingResources r;
  Timing t;
  t.graph = o.graph;

  // Rotation: whole copies of the arena (weights, inputs, activations), each forward on the next copy, so that
  // no forward finds the previous one's data in L2. At most half of the free memory and 512 copies.
  int64_t sets = 1;
  if (o.rotateBytes > 0 && m.arenaBytes > 0) {
    sets = std::clamp<int64_t>((o.rotateBytes + m.arenaBytes - 1) / m.arenaBytes, 2, 512);
    size_t freeBytes = 0, totalBytes = 0;
    KILN_CU(cuMemGetInfo, "", &freeBytes, &totalBytes);
    sets = std::max<int64_t>(1, std::min<int64_t>(sets, 1 + static_cast<int64_t>(freeBytes / 2) / m.arenaBytes));
  }
  for (int64_t c = 1; c < sets; ++c) {
    CUdeviceptr p = 0;
    KILN_CU(cuMemAlloc, fmt::format(" allocating arena copy {} of {} for timing", c, sets - 1), &p,
            static_cast<size_t>(m.arenaBytes));
    r.copies.push_back(p);
    KILN_CU(cuMemcpyDtoD, " copying the arena for timing", p, s.arena, static_cast<size_t>(m.arenaBytes));
  }
  // The copies run on the legacy stream and may still be in flight; a graph replays on a non-blocking stream.
  KILN_CU(cuCtxSynchronize, " after copying the arena for timing");
  t.sets = static_cast<int>(sets);
  t.rotatedBytes = sets > 1 ? sets * m.arenaBytes : 0;
  // Kernel arguments per copy: the same offsets from another base.
  std::vector<std::vector<LaunchArgs>> args(static_cast<size_t>(sets));
  for (int64_t c = 0; c < sets; ++c) {
    CUdeviceptr base = c == 0 ? s.arena : r.copies[static_cast<size_t>(c - 1)];
    for (const KernelInfo& k : m.kernels) args[static_cast<size_t>(c)].push_back(launchArgs(m, k, base));
  }

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
  const BufferInfo* b = impl_->m.findBuffer(bufferId);
  if (!b) userError("kiln runtime: model '{}' has no buffer {}", impl_->m.model, bufferId);
  return Binding{nullptr, impl_->ptr(*b)};
}

double Model::timeForward(int iters) {
  if (iters <= 0) userError("kiln runtime: timing forward() needs iters > 0, got {}", iters);
  Impl& s = *impl_;
  const Manifest& m = s.m;
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
  std::vector<double> ms(s.m.kernels.size());
  for (size_t i = 0; i < s.m.kernels.size(); ++i) {
    s.launch(i, false);  // warm-up: the module's first launch and the instruction cache
    KILN_CU(cuEventRecord, "", r.start, nullptr);
    for (int l = 0; l < launches; ++l) s.launch(i, false);
    KILN_CU(cuEventRecord, "", r.stop, nullptr);
    KILN_CU(cuEventSynchronize, fmt::format(" while timing kernel '{}'", s.m.kernels[i].name), r.stop);
    float elapsed = 0;
    KILN_CU(cuEventElapsedTime, "", &elapsed, r.start, r.stop);
    ms[i] = static_cast<double>(elapsed) / launches;
  }
  return ms;
}

std::string Model::deviceName() const { return impl_->name; }
int Model::computeCapability() const { return impl_->cc; }
const Manifest& Model::manifest() const { return impl_->m; }

}  // namespace kiln::runtime
