// The runtime: runs a directory written by `kiln compile` (manifest.json, cubins, weights.bin) with the CUDA
// Driver API and nothing else — no LibTorch, no compiler (DESIGN.md §1 "runtime").
//
// libcuda is opened with dlopen on first use rather than linked, so the kiln binary starts and runs its CPU
// paths (compile, dump, interpret) on machines without a CUDA driver, such as CI. Nothing here includes
// <cuda.h>; the Driver API types stay inside runtime.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln_runtime.h"
#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"

namespace kiln::runtime {

// A runtime failure of a known kind (kiln::ErrorCode, the public header's): the public API passes the kind on with
// RuntimeError::code(). Other UserErrors of the runtime are about the directory (ErrorCode::BadModel).
struct Failure : UserError {
  Failure(ErrorCode c, const std::string& what) : UserError(what), code(c) {}
  ErrorCode code;
};
template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Failure(code, fmt::format(f, std::forward<Args>(args)...));
}


// True if a CUDA driver can be loaded, initialises, and reports at least one device. Otherwise false, and *why
// (if given) says which of those failed, e.g. "no CUDA driver (libcuda.so.1) on this machine". Never throws, so
// callers (tests, `kiln run`) can skip GPU work with a clear reason instead of crashing.
bool gpuAvailable(std::string* why = nullptr);

// "CUDA 13.0 (headers the runtime was built with), driver 13.0" or "..., no driver here: <why>" (kiln --version).
std::string cudaVersions();

struct TimingOptions {
  int warmup = 3;            // untimed forwards first (with a graph: at least one replay)
  int iters = 100;           // forwards to time (with a graph: rounded up to whole replays)
  // Capture the kernels in one CUDA graph and replay it (no per-launch CPU cost). The graph holds several forwards
  // (up to `iters`, at most 4096 kernels, a whole number of rotation cycles), so that a replay's own launch cost
  // is shared by them, as in a framework's graph-captured timing loop.
  bool graph = true;
  int64_t rotateBytes = 0;   // > 0: cycle over copies of the whole arena (weights included) until at least this
                             // many bytes are touched, so that a forward does not find its data in L2
};

struct Timing {
  double msPerForward = 0;
  int forwards = 0;          // forwards timed
  int forwardsPerGraph = 1;  // forwards one graph replay runs (graph timing)
  int sets = 1;              // arena copies cycled (1: no rotation)
  int64_t rotatedBytes = 0;  // sets * arena bytes when rotating
  bool graph = false;
};

// Where forward() reads an input or writes an output: exactly one of a host pointer (pageable or pinned memory of
// the buffer's byte size) and a device pointer (a CUdeviceptr in the Model's context, the primary one of its device).
struct Binding {
  void* host = nullptr;
  uint64_t device = 0;
};

struct ForwardOptions {
  void* stream = nullptr;  // a CUstream; nullptr: a non-blocking stream of the Model's own
  // Capture the kernels as a CUDA graph on the first forward() and replay it after (one launch for the whole
  // forward). Off: the kernels are launched one by one, no synchronization between them.
  bool graph = true;
  // Debugging: launch kernel by kernel and synchronize the stream after each, so that a fault names the kernel that
  // caused it (as run() does). Overrides `graph`.
  bool syncEachKernel = false;
};

// Device memory that lives as long as the object, not a forward: a decode loop's state (the KV cache), bound with
// forward() as both an input and an output of every step (forward() copies the inputs into the arena before the
// kernels and the outputs out after them, so one buffer can be both) and shared by a directory's entry points. In the
// primary context of device 0, the Models' own. Moved-from buffers hold nothing. UserError (one line) without a
// usable GPU or when the allocation or a copy fails.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t bytes);
  ~DeviceBuffer();  // frees; never throws
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const std::vector<std::byte>& bytes);  // exactly bytes() of them (UserError otherwise)
  std::vector<std::byte> download() const;
  // Copies all of its bytes from (copyFrom) or to (copyTo) device memory of at least bytes() in the same context, such
  // as a Model's own buffer (Model::binding), and waits for the copy.
  void copyFrom(uint64_t device);
  void copyTo(uint64_t device) const;
  Binding binding() const { return Binding{nullptr, device_}; }
  int64_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  uint64_t device_ = 0;
  int64_t bytes_ = 0;
  void* context_ = nullptr;  // the retained primary context (CUcontext)
};

// One entry point of a compiled directory loaded onto a device: its cubins, and the directory's weights uploaded once
// (shared with the entries loaded beside it by loadEntry). Immutable once made; any number of Models (sessions) run on
// one, from any threads. Opaque here (src/runtime/loaded_model.h).
struct LoadedModel;
// Reads and validates DIR/manifest.json (entry `entry`'s: manifestFileName), checks the files it lists against their
// sizes and hashes (verifyFiles; `filesChecked`: the caller just did, or just wrote them — hashing gigabytes of weights
// twice is skipped), retains the primary context of `device`, loads every cubin and uploads the weights. Failure with
// ErrorCode::NoDevice without a usable driver, InvalidArgument for a device the driver does not list, Unsupported for
// cubins of another architecture.
std::shared_ptr<const LoadedModel> loadModel(const std::filesystem::path& dir, bool filesChecked = false,
                                             const std::string& entry = "", int device = 0);
// Another entry of `sibling`'s directory on its device, sharing its weights on the device (those it also reads are not
// uploaded again).
std::shared_ptr<const LoadedModel> loadEntry(const LoadedModel& sibling, const std::string& entry,
                                             bool filesChecked = false);

// A session of a loaded model: its own arena (inputs, outputs, activations, counters and states: every buffer but the
// weights, which the LoadedModel holds once), stream and captured graphs. Uses the device's *primary* context, the one
// the CUDA runtime (and so LibTorch) uses too, so that a Model and LibTorch in the same process see the same memory
// and don't pay for a second context.
//
// Every Driver API failure throws kiln::UserError with one line naming the call, the kernel or file involved
// and the CUDA error, e.g. "kiln runtime: cuLaunchKernel failed for kernel 'k3_softmax': CUDA_ERROR_INVALID_VALUE
// (invalid argument)". Not thread-safe: use one Model from one thread at a time (Models of one LoadedModel are
// independent).
class Model {
 public:
  // A session over `loaded`: allocates its arena (zero-filled). The LoadedModel lives as long as its last session.
  explicit Model(std::shared_ptr<const LoadedModel> loaded);
  // loadModel(dir, filesChecked, entry, device) and a session over it.
  explicit Model(const std::filesystem::path& dir, bool filesChecked = false, const std::string& entry = "",
                 int device = 0);
  ~Model();  // frees everything; never throws
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::shared_ptr<const LoadedModel>& loaded() const;
  // Device memory this session allocated (its arena), and the weights it shares with the other sessions.
  int64_t sessionBytes() const;
  int64_t weightBytes() const;

  // One forward pass. `inputs` are raw bytes in manifest().inputs order; each must have exactly the buffer's
  // byte size (UserError otherwise). Output and temp buffers are filled with 0xFF bytes (NaN for floats) before the
  // kernels run, so a kernel that fails to write part of its output shows up as NaNs rather than as stale values from
  // an earlier run (but for outputs written in place of an input, whose bytes hold the input). Synchronizes after
  // every kernel so that an asynchronous fault is blamed on the kernel that caused it. Returns the outputs' bytes in
  // manifest().outputs order.
  std::vector<std::vector<std::byte>> run(const std::vector<std::vector<std::byte>>& inputs);
  // The same, calling afterKernel(i) once kernel i (manifest().kernels order) has run and the device is synchronized:
  // what `kiln run --bisect` reads each kernel's outputs with (readBuffer) before a later kernel reuses their bytes.
  std::vector<std::vector<std::byte>> run(const std::vector<std::vector<std::byte>>& inputs,
                                          const std::function<void(size_t kernel)>& afterKernel);
  // A buffer's bytes in the arena, copied to the host, and back (the manifest's sizes; UserError for an id it does not
  // list or bytes of another size).
  std::vector<std::byte> readBuffer(int64_t bufferId) const;
  void writeBuffer(int64_t bufferId, const std::vector<std::byte>& bytes);

  // One forward pass for serving, asynchronous on `options.stream`; returns once the host outputs are written (the
  // stream is synchronized only when some output is a host buffer). No poisoning and no per-kernel synchronization
  // (unless options.syncEachKernel). Bindings in manifest().inputs / outputs order.
  //
  // A device binding is bound in place of the buffer's arena bytes — the kernels read and write the caller's memory,
  // nothing is copied — when its address is a multiple of kArenaAlignment (what the kernels assume of a buffer), no
  // other binding of this call overlaps an output's bytes, and some kernel uses the buffer; a state updated in place
  // (BufferInfo::inPlaceOf) only when its input and output are bound to the same address. Every other binding is
  // copied into the arena before the kernels and out after them, on the stream (a host one always).
  //
  // The kernels are captured as a CUDA graph on the first call with a given set of bound addresses and replayed after;
  // the graphs of the last kMaxGraphs sets are kept (a serving loop cycling over a few buffers captures each once).
  // Later calls may use another stream, but not another `graph` choice without cost (a launched forward simply does not
  // use the graph).
  static constexpr size_t kMaxGraphs = 8;
  void forward(const std::vector<Binding>& inputs, const std::vector<Binding>& outputs,
               const ForwardOptions& options = {});

  // A buffer's own bytes in the arena, as a device binding. Bound as an input or an output, forward() copies nothing
  // for it: a state updated in place (BufferInfo::inPlaceOf) bound so as both its input and its output stays in the
  // arena from one forward to the next. UserError for an id the manifest does not list.
  Binding binding(int64_t bufferId) const;

  // GPU time per forward pass (CUDA events around back-to-back passes on one stream, after warm-up; no
  // per-kernel synchronization, no copies). Uses whatever the arena holds (the inputs of the last run(), zeros
  // before the first), so call run() first when timing depends on the data. A state updated in place
  // (BufferInfo::inPlaceOf) is read by each timed forward as the one before left it.
  Timing time(const TimingOptions& options);

  // GPU time per forward() with its defaults (the Model's stream, graph replay), inputs and outputs bound to device
  // buffers of their own (bound in place where forward() allows it, copied otherwise): what a serving loop on the GPU
  // pays per forward. CUDA events
  // around `iters` back-to-back calls, after 3 warm-up calls.
  double timeForward(int iters);

  // GPU time of each kernel alone, ms per launch, in manifest().kernels order: one warm-up launch, then
  // `launches` back-to-back launches of that kernel between two CUDA events on the default stream. A kernel
  // only reads buffers other kernels wrote and writes its own, so repeating it changes nothing; it runs on what
  // the arena holds (call run() first), with its inputs hot in L2 after the first launch.
  std::vector<double> timeEachKernel(int launches);

  std::string deviceName() const;  // e.g. "NVIDIA H200"
  int computeCapability() const;   // major*10 + minor, e.g. 90
  const Manifest& manifest() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::runtime
