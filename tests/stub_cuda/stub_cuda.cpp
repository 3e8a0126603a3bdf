// A stand-in for the CUDA driver (libcuda.so.1) on machines without a GPU, so that the runtime library's own logic
// (loading, weights shared by sessions, device buffers bound in place of arena bytes, graph capture and replay) is
// tested in CI. Built as build/stub_cuda/libcuda.so.1; a test puts that directory on LD_LIBRARY_PATH and the runtime's
// dlopen finds it instead of a driver.
//
// Device memory is host memory (a CUdeviceptr is the host address), everything runs synchronously on the calling
// thread, and a "cubin" is a text the test writes:
//
//     kiln-stub-cubin
//     ENTRY add N      params p0 p1 p2: p2[i] = p0[i] + p1[i], i < N (f32)
//     ENTRY copy N     params p0 p1:    p1[i] = p0[i]
//     end              (lines under 256 bytes; an image has no size, so "end" is where reading stops)
//
// Any other image (a real cubin) loads too; its kernels do nothing when launched. Launches made while a stream is
// captured are recorded with their pointer arguments (read at capture, as the driver copies them) and run when the
// instantiated graph is launched. kiln_stub_stats() counts what the runtime did, for the tests to assert on.
#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "stub_cuda.h"

namespace {

struct Function {
  std::string entry, op;  // op "" for a kernel of a real cubin (does nothing)
  int64_t n = 0;
};
struct Module {
  std::map<std::string, Function> functions;
};
struct Node {
  const Function* f;
  std::vector<CUdeviceptr> params;
};
struct Graph {
  std::vector<Node> nodes;
};
struct Stream {
  Graph* capture = nullptr;  // non-null while captured
};

std::mutex mu;
kiln_stub_stats stats;
std::map<CUdeviceptr, size_t> allocations;
std::map<std::string, std::vector<CUdeviceptr>> lastParams;  // by entry
int contextToken;

int paramCount(const Function& f) { return f.op == "add" ? 3 : f.op == "copy" ? 2 : 0; }

void execute(const Node& node) {
  std::lock_guard<std::mutex> lock(mu);
  ++stats.launches;
  lastParams[node.f->entry] = node.params;
  const auto* a = reinterpret_cast<const float*>(node.params.empty() ? 0 : node.params[0]);
  if (node.f->op == "add") {
    const auto* b = reinterpret_cast<const float*>(node.params[1]);
    auto* c = reinterpret_cast<float*>(node.params[2]);
    for (int64_t i = 0; i < node.f->n; ++i) c[i] = a[i] + b[i];
  } else if (node.f->op == "copy") {
    std::memmove(reinterpret_cast<void*>(node.params[1]), a, static_cast<size_t>(node.f->n) * sizeof(float));
  }
}

CUresult launch(CUfunction fn, CUstream hStream, void** params) {
  auto* f = reinterpret_cast<const Function*>(fn);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  Node node{f, {}};
  for (int i = 0; i < paramCount(*f); ++i) node.params.push_back(*static_cast<CUdeviceptr*>(params[i]));
  auto* s = reinterpret_cast<Stream*>(hStream);
  if (s && s->capture) {
    s->capture->nodes.push_back(std::move(node));
    return CUDA_SUCCESS;
  }
  execute(node);
  return CUDA_SUCCESS;
}

bool capturing(CUstream hStream) {
  auto* s = reinterpret_cast<Stream*>(hStream);
  return s && s->capture;
}

CUresult copyBytes(void* to, const void* from, size_t bytes, uint64_t kiln_stub_stats::*counter) {
  std::memmove(to, from, bytes);
  std::lock_guard<std::mutex> lock(mu);
  stats.*counter += bytes;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

const kiln_stub_stats* kiln_stub_get_stats(void) { return &stats; }

void kiln_stub_reset_stats(void) {
  std::lock_guard<std::mutex> lock(mu);
  const uint64_t live = stats.live_bytes;
  stats = kiln_stub_stats{};
  stats.live_bytes = live;
  lastParams.clear();
}

size_t kiln_stub_last_params(const char* entry, uint64_t* params, size_t max) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = lastParams.find(entry);
  if (it == lastParams.end()) return 0;
  for (size_t i = 0; i < it->second.size() && i < max; ++i) params[i] = it->second[i];
  return it->second.size();
}

CUresult CUDAAPI cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuDriverGetVersion(int* v) { *v = 13000; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGetCount(int* n) { *n = 1; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice) {
  std::strncpy(name, "kiln stub GPU", static_cast<size_t>(len));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9
       : a == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ? 232448 : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) {
  *c = reinterpret_cast<CUcontext>(&contextToken);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSynchronize(void) { return CUDA_SUCCESS; }

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  auto* m = new Module;
  const char* text = static_cast<const char*>(image);
  if (std::strncmp(text, "kiln-stub-cubin\n", 16) == 0) {
    // The image has no size: its lines are read up to "end", never past it.
    std::string lines;
    for (const char* line = text + 16; std::strncmp(line, "end\n", 4) != 0;) {
      const char* eol = static_cast<const char*>(std::memchr(line, '\n', 256));
      if (!eol) break;
      lines.append(line, static_cast<size_t>(eol - line + 1));
      line = eol + 1;
    }
    std::istringstream in(lines);
    Function f;
    while (in >> f.entry >> f.op >> f.n) m->functions[f.entry] = f;
  }
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction* fn, CUmodule module, const char* name) {
  auto* m = reinterpret_cast<Module*>(module);
  Function& f = m->functions[name];  // a real cubin's kernel: created here, does nothing
  f.entry = name;
  *fn = reinterpret_cast<CUfunction>(&f);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  delete reinterpret_cast<Module*>(module);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  void* host = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!host) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(host);
  std::lock_guard<std::mutex> lock(mu);
  allocations[*p] = bytes;
  ++stats.allocations;
  stats.live_bytes += bytes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = allocations.find(p);
  if (it == allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  stats.live_bytes -= it->second;
  allocations.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemGetInfo(size_t* free, size_t* total) {
  *free = *total = size_t{1} << 30;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) {
  std::memset(reinterpret_cast<void*>(p), v, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr to, const void* from, size_t n) {
  return copyBytes(reinterpret_cast<void*>(to), from, n, &kiln_stub_stats::host_to_device_bytes);
}
CUresult CUDAAPI cuMemcpyDtoH(void* to, CUdeviceptr from, size_t n) {
  return copyBytes(to, reinterpret_cast<const void*>(from), n, &kiln_stub_stats::device_to_host_bytes);
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr to, CUdeviceptr from, size_t n) {
  return copyBytes(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), n,
                   &kiln_stub_stats::device_to_device_bytes);
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr to, const void* from, size_t n, CUstream s) {
  return capturing(s) ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : cuMemcpyHtoD(to, from, n);
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void* to, CUdeviceptr from, size_t n, CUstream s) {
  return capturing(s) ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : cuMemcpyDtoH(to, from, n);
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr to, CUdeviceptr from, size_t n, CUstream s) {
  return capturing(s) ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : cuMemcpyDtoD(to, from, n);
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream s, void** params, void**) {
  return launch(f, s, params);
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void**) {
  return launch(f, config->hStream, params);
}
CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType, cuuint32_t, void* address,
                                        const cuuint64_t*, const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                        CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                        CUtensorMapFloatOOBfill) {
  std::memset(map, 0, sizeof *map);
  std::memcpy(map, &address, sizeof address);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream* s, unsigned int) {
  *s = reinterpret_cast<CUstream>(new Stream);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream s) {
  delete reinterpret_cast<Stream*>(s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode) {
  auto* s = reinterpret_cast<Stream*>(hStream);
  if (!s || s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  s->capture = new Graph;
  std::lock_guard<std::mutex> lock(mu);
  ++stats.captures;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* graph) {
  auto* s = reinterpret_cast<Stream*>(hStream);
  if (!s || !s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  *graph = reinterpret_cast<CUgraph>(s->capture);
  s->capture = nullptr;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  *exec = reinterpret_cast<CUgraphExec>(new Graph(*reinterpret_cast<Graph*>(graph)));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream) {
  {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.graph_launches;
  }
  for (const Node& n : reinterpret_cast<Graph*>(exec)->nodes) execute(n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  delete reinterpret_cast<Graph*>(exec);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  delete reinterpret_cast<Graph*>(graph);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* e, unsigned int) {
  *e = reinterpret_cast<CUevent>(new int(0));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent, CUevent) {
  *ms = 1.0f;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent e) {
  delete reinterpret_cast<int*>(e);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult r, const char** s) {
  *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_STUB";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_SUCCESS ? "no error" : "an error of kiln's stub driver";
  return CUDA_SUCCESS;
}

}  // extern "C"
