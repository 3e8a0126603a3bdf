// Loading an entry point onto a device (loaded_model.h): the context, the weights uploaded once per directory and
// device, the cubins, and the session layout.
#include "loaded_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "kiln/support/error.h"
#include "kiln/support/files.h"
#include "kiln/support/target.h"

namespace kiln::runtime {
namespace fs = std::filesystem;

namespace {

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

bool hasWeights(const Manifest& m) {
  return std::any_of(m.buffers.begin(), m.buffers.end(),
                     [](const BufferInfo& b) { return b.kind == BufferKind::Weight && b.bytes > 0; });
}

void loadKernels(LoadedModel& l) {
  const DeviceContext& d = l.device();
  for (const KernelInfo& k : l.m.kernels) {
    fs::path file = l.dir / k.cubin;
    auto it = l.modules.find(k.cubin);
    if (it == l.modules.end()) {
      std::vector<char> image = readFile(file, "cubin");
      CUmodule mod = nullptr;
      KILN_CU(cuModuleLoadData, fmt::format(" for {} (kernel '{}')", quoted(file), k.name), &mod, image.data());
      it = l.modules.emplace(k.cubin, mod).first;
    }
    CUfunction f = nullptr;
    KILN_CU(cuModuleGetFunction, fmt::format(" for entry '{}' of kernel '{}' in {}", k.entry, k.name, quoted(file)),
            &f, it->second, k.entry.c_str());
    if (k.sharedBytes > d.sharedOptIn)
      userError("kiln runtime: kernel '{}' needs {} bytes of shared memory per block; {} allows at most {}", k.name,
                k.sharedBytes, d.name, d.sharedOptIn);
    if (k.sharedBytes > Target::kSharedWithoutOptIn)  // above it a kernel must opt in to its dynamic shared memory
      KILN_CU(cuFuncSetAttribute, fmt::format(" for kernel '{}'", k.name), f,
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(k.sharedBytes));
    l.funcs.push_back(f);
  }
}

// Reads and checks the entry's manifest and files (loadModel's and loadEntry's first step).
Manifest readChecked(const fs::path& dir, const std::string& entry, bool filesChecked) {
  Manifest m = readManifest(dir, entry);
  if (!filesChecked) verifyFiles(m, dir);  // weights and cubins as kiln wrote them (format 2 manifests)
  return m;
}

std::shared_ptr<const LoadedModel> finishLoading(Manifest m, const fs::path& dir, std::shared_ptr<DeviceWeights> w) {
  auto l = std::make_shared<LoadedModel>();
  l->m = std::move(m);
  l->dir = dir;
  l->weights = std::move(w);
  const DeviceContext& d = l->device();
  d.makeCurrent();
  // Say so before the driver gives a bare CUDA_ERROR_NO_BINARY_FOR_GPU.
  if (std::string why = archMismatch(l->m.arch, d.cc / 10, d.cc % 10); !why.empty())
    fail(ErrorCode::Unsupported, "kiln runtime: {} cannot run on device {} ({}): {}", quoted(dir), d.ordinal, d.name, why);
  loadKernels(*l);
  l->weights->upload(l->m);
  layOutSession(l->m, l->sessionOffset, l->sessionBytes);
  for (const KernelInfo& k : l->m.kernels) l->usedByKernels.insert(k.params.begin(), k.params.end());
  for (const BufferInfo& b : l->m.buffers)
    if (b.inPlaceOf >= 0) {
      l->inPlacePartner[b.id] = b.inPlaceOf;
      l->inPlacePartner[b.inPlaceOf] = b.id;
    }
  KILN_CU(cuCtxSynchronize, " after uploading weights");
  return l;
}

}  // namespace

DeviceContext::DeviceContext(int device) : ordinal(device) {
  int count = 0;
  KILN_CU(cuDeviceGetCount, "", &count);
  if (device < 0 || device >= count)
    fail(ErrorCode::InvalidArgument, "kiln runtime: there is no CUDA device {}: the driver lists {} ({})", device,
         count, count == 1 ? "device 0" : fmt::format("devices 0 to {}", count - 1));
  KILN_CU(cuDeviceGet, "", &dev, ordinal);
  char buf[256] = {};
  KILN_CU(cuDeviceGetName, "", buf, sizeof buf, dev);
  name = buf;
  int major = 0, minor = 0;
  KILN_CU(cuDeviceGetAttribute, "", &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  KILN_CU(cuDeviceGetAttribute, "", &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  KILN_CU(cuDeviceGetAttribute, "", &sharedOptIn, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  cc = major * 10 + minor;
  KILN_CU(cuDevicePrimaryCtxRetain, "", &ctx, dev);
}

DeviceContext::~DeviceContext() {
  if (ctx) driver().fn_cuDevicePrimaryCtxRelease(dev);
}

void DeviceContext::makeCurrent() const { KILN_CU(cuCtxSetCurrent, "", ctx); }

DeviceWeights::DeviceWeights(std::shared_ptr<const DeviceContext> device, fs::path file)
    : device_(std::move(device)), file_(std::move(file)) {}

DeviceWeights::~DeviceWeights() {
  // Best effort and silent: a destructor must not throw, and after a sticky error these calls fail anyway.
  const Driver& d = driver();
  d.fn_cuCtxSetCurrent(device_->ctx);
  if (base_) d.fn_cuMemFree(base_);
  for (auto& [offset, p] : unaligned_) d.fn_cuMemFree(p);
}

void DeviceWeights::upload(const Manifest& m) {
  if (!hasWeights(m)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (std::string kind = notARegularFile(file_.string()); !kind.empty())
    userError("kiln runtime: weights file {} is {}, not a file", quoted(file_), kind);
  std::ifstream in(file_, std::ios::binary | std::ios::ate);
  if (!in) userError("kiln runtime: cannot open weights file {}", quoted(file_));
  const int64_t size = static_cast<int64_t>(in.tellg());
  device_->makeCurrent();
  if (!base_ && size > 0) {
    KILN_CU(cuMemAlloc, fmt::format(" allocating {} bytes for the weights of {}", size, quoted(file_)), &base_,
            static_cast<size_t>(size));
    bytes_ = size;
  }
  std::vector<char> chunk;
  for (const BufferInfo& b : m.buffers) {
    if (b.kind != BufferKind::Weight || b.bytes == 0) continue;
    if (b.weightOffset + b.bytes > std::min(size, bytes_))
      userError("kiln runtime: weight '{}' needs bytes [{}, {}) of {}, which has only {} bytes", b.name,
                b.weightOffset, b.weightOffset + b.bytes, quoted(file_), size);
    const bool aligned = b.weightOffset % kArenaAlignment == 0;
    if (aligned ? !uploaded_.insert({b.weightOffset, b.bytes}).second : unaligned_.count(b.weightOffset) > 0) continue;
    CUdeviceptr to = base_ + static_cast<CUdeviceptr>(b.weightOffset);
    if (!aligned) {
      KILN_CU(cuMemAlloc, fmt::format(" allocating weight '{}'", b.name), &to, static_cast<size_t>(b.bytes));
      unaligned_[b.weightOffset] = to;
    }
    chunk.resize(static_cast<size_t>(b.bytes));
    in.seekg(b.weightOffset);
    if (!in.read(chunk.data(), static_cast<std::streamsize>(b.bytes)))
      userError("kiln runtime: cannot read weight '{}' from {}", b.name, quoted(file_));
    KILN_CU(cuMemcpyHtoD, fmt::format(" uploading weight '{}'", b.name), to, chunk.data(), chunk.size());
  }
}

CUdeviceptr DeviceWeights::pointer(const BufferInfo& weight) const {
  if (weight.weightOffset % kArenaAlignment == 0) return base_ + static_cast<CUdeviceptr>(weight.weightOffset);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = unaligned_.find(weight.weightOffset);
  return it == unaligned_.end() ? 0 : it->second;
}

LoadedModel::~LoadedModel() {
  const Driver& d = driver();
  if (!weights) return;
  d.fn_cuCtxSetCurrent(device().ctx);
  for (auto& [file, mod] : modules) d.fn_cuModuleUnload(mod);
}

void layOutSession(const Manifest& m, std::unordered_map<int64_t, int64_t>& offsets, int64_t& bytes) {
  // The weights' slices of the manifest's arena (aligned ends), merged where they touch.
  std::vector<std::pair<int64_t, int64_t>> slices;
  for (const BufferInfo& b : m.buffers)
    if (b.kind == BufferKind::Weight) slices.push_back({b.offset, arenaAligned(b.offset + b.bytes)});
  std::sort(slices.begin(), slices.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& s : slices) {
    if (!merged.empty() && s.first <= merged.back().second) merged.back().second = std::max(merged.back().second, s.second);
    else merged.push_back(s);
  }
  bytes = 0;
  for (const BufferInfo& b : m.buffers) {
    if (b.kind == BufferKind::Weight) continue;
    int64_t below = 0;  // weight bytes removed under this buffer's offset
    for (const auto& [begin, end] : merged)
      if (end <= b.offset) below += end - begin;
    offsets[b.id] = b.offset - below;
    bytes = std::max(bytes, arenaAligned(b.offset - below + b.bytes));
  }
}

std::shared_ptr<const LoadedModel> loadModel(const fs::path& dir, bool filesChecked, const std::string& entry, int device) {
  Manifest m = readChecked(dir, entry, filesChecked);
  if (std::string why = initDriver(); !why.empty())
    fail(ErrorCode::NoDevice, "kiln runtime: cannot run {} on a GPU: {}", quoted(dir), why);
  auto context = std::make_shared<const DeviceContext>(device);
  auto weights = std::make_shared<DeviceWeights>(context, dir / m.weightsFile);
  return finishLoading(std::move(m), dir, std::move(weights));
}

std::shared_ptr<const LoadedModel> loadEntry(const LoadedModel& sibling, const std::string& entry, bool filesChecked) {
  Manifest m = readChecked(sibling.dir, entry, filesChecked);
  std::shared_ptr<DeviceWeights> weights = sibling.weights;
  if (sibling.dir / m.weightsFile != weights->file())  // another weights file: nothing to share
    weights = std::make_shared<DeviceWeights>(sibling.weights->sharedDevice(), sibling.dir / m.weightsFile);
  return finishLoading(std::move(m), sibling.dir, std::move(weights));
}

}  // namespace kiln::runtime
