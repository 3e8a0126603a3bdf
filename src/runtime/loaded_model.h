// What a loaded model shares between its sessions (internal to src/runtime): the device and its primary context, the
// directory's weights on the device, an entry's manifest and loaded cubins, and where each of its other buffers lives
// in a session's arena. runtime::Model (runtime.cpp) is one session over a LoadedModel.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "driver.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime {

// One device, its primary context retained for as long as this lives.
struct DeviceContext {
  explicit DeviceContext(int ordinal);  // Failure (InvalidArgument) for an ordinal the driver does not list
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  void makeCurrent() const;

  int ordinal = 0;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  std::string name;  // "NVIDIA H200"
  int cc = 0;        // compute capability, major * 10 + minor
  int sharedOptIn = 0;  // bytes of dynamic shared memory a block may opt in to
};

// A directory's weights file on one device: one allocation of the file's size, into which the byte ranges that the
// loaded entries' weights use are uploaded, each once, so that every entry point and every session reads one copy.
// (The file also holds states' initial values, which are read from the host when a state is reset: their bytes are
// allocated here but not uploaded.) A weight whose offset in the file is not a multiple of kArenaAlignment (a
// directory written by hand) gets an aligned allocation of its own instead.
class DeviceWeights {
 public:
  DeviceWeights(std::shared_ptr<const DeviceContext> device, std::filesystem::path file);
  ~DeviceWeights();  // frees; never throws
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // Uploads the weights of m that are not on the device yet. UserError for a weight past the file's end.
  void upload(const Manifest& m);
  CUdeviceptr pointer(const BufferInfo& weight) const;
  CUdeviceptr base() const { return base_; }
  int64_t bytes() const { return bytes_; }
  const std::filesystem::path& file() const { return file_; }
  const DeviceContext& device() const { return *device_; }
  const std::shared_ptr<const DeviceContext>& sharedDevice() const { return device_; }

 private:
  std::shared_ptr<const DeviceContext> device_;
  std::filesystem::path file_;
  CUdeviceptr base_ = 0;
  int64_t bytes_ = 0;
  mutable std::mutex mu_;  // upload() may run for two entries loaded from two threads
  std::set<std::pair<int64_t, int64_t>> uploaded_;  // (offset, bytes)
  std::map<int64_t, CUdeviceptr> unaligned_;         // weight_offset -> its own allocation
};

// One entry point loaded onto a device: immutable once made, shared by every session (runtime::Model) made from it.
struct LoadedModel {
  ~LoadedModel();  // unloads the cubins; never throws

  Manifest m;
  std::filesystem::path dir;
  std::shared_ptr<DeviceWeights> weights;
  std::map<std::string, CUmodule> modules;  // by cubin file, so kernels sharing a cubin load it once
  std::vector<CUfunction> funcs;            // parallel to m.kernels
  // A session's arena holds every buffer but the weights: each at its manifest offset less the weights' slices
  // below it (so buffers that share bytes in the manifest's plan still do), in sessionBytes.
  std::unordered_map<int64_t, int64_t> sessionOffset;  // by buffer id; weights absent
  int64_t sessionBytes = 0;
  // For forward()'s binding rule, derived once: the buffers some kernel binds, and each state updated in place's
  // partner (its input's id -> its output's, and back: BufferInfo::inPlaceOf).
  std::unordered_set<int64_t> usedByKernels;
  std::unordered_map<int64_t, int64_t> inPlacePartner;

  const DeviceContext& device() const { return weights->device(); }
};

// The session layout of m's non-weight buffers (LoadedModel::sessionOffset, sessionBytes).
void layOutSession(const Manifest& m, std::unordered_map<int64_t, int64_t>& offsets, int64_t& bytes);

}  // namespace kiln::runtime
