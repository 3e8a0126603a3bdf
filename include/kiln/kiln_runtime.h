// kiln's runtime library: runs a directory written by `kiln compile MODEL.pt --emit cuda -o DIR` (manifest.json,
// one cubin per kernel, weights.bin) on an NVIDIA GPU, with the CUDA Driver API and nothing else: no LibTorch, no
// compiler, no CUDA headers needed to use it. This is the one public header of the installed package
//
//     find_package(kiln REQUIRED)                  # cmake --install puts its config under lib/cmake/kiln
//     target_link_libraries(app PRIVATE kiln::runtime)   # shared; kiln::runtime_static for the static archive
//
// and the example examples/run_emitted/ shows it end to end.
//
// The driver (libcuda.so.1) is opened at run time, so a program linked against the runtime starts on a machine
// without a GPU; describe() works there, and Model's (or Runtime's) constructor then fails with a RuntimeError saying
// why.
//
// Errors: every failure (a malformed directory, a cubin built for another GPU, a Driver API error, a binding of the
// wrong count, size or name) throws kiln::RuntimeError whose what() is one line naming the file, kernel or buffer
// involved, and whose code() says which kind of failure it is.
//
// Models and sessions: a Model is a directory loaded onto a device — its kernels and its weights, uploaded once — and
// a Session runs it: its own arena (inputs, outputs, activations), stream and captured graphs. Any number of Sessions
// share one Model's weights, e.g. one per serving thread; a Runtime is a Model with one Session, for the simple case.
// Each uses the primary context of its device (RuntimeOptions::device, 0 by default), which the CUDA runtime and
// frameworks share, so device pointers from cudaMalloc on that device can be bound.
//
// Lifetimes: each object frees what it made in its destructor; a Session keeps its Model's device state alive, so a
// Model may be destroyed before its Sessions. An object that was moved from holds nothing: every member but assignment
// and destruction throws RuntimeError (ErrorCode::InvalidArgument) instead of touching freed state.
//
// Threads: a Model is immutable once loaded; Sessions on it are independent and may run concurrently from different
// threads. A Session (and a Runtime) is not thread-safe (one arena: two concurrent runs would overwrite each other); a
// run() that starts while another is still in run() on the same Session throws RuntimeError
// (ErrorCode::InvalidArgument) rather than racing. info() returns a reference into its object: it lives as long.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// What the shared library exports (it is built with hidden visibility; nothing else of kiln is visible).
#define KILN_RUNTIME_API __attribute__((visibility("default")))

namespace kiln {

// The release of kiln this library belongs to, e.g. "0.1.0" (what `kiln --version` prints first).
KILN_RUNTIME_API const char* version();

// What kind of failure a RuntimeError reports.
enum class ErrorCode {
  InvalidArgument,  // the call's fault: bindings of the wrong count, size or name; a device the driver does not list;
                    // a Runtime that was moved from
  BadModel,         // the directory's: a missing, malformed or inconsistent manifest, cubin or weights file, or a
                    // kernel the GPU cannot run (too much shared memory)
  NoDevice,         // no CUDA driver, or no GPU, on this machine
  Unsupported,      // the directory's cubins are for another GPU architecture
  Driver,           // a CUDA Driver API call failed (a fault in a kernel, out of memory, ...)
  Internal,         // a bug in kiln: please report it with the message
};
KILN_RUNTIME_API const char* errorCodeName(ErrorCode code);  // "invalid-argument", "bad-model", ...

class KILN_RUNTIME_API RuntimeError : public std::runtime_error {
 public:
  explicit RuntimeError(const std::string& what, ErrorCode code = ErrorCode::Internal)
      : std::runtime_error(what), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// An element type of the model's tensors (4, 2, 2, 8 and 1 bytes).
enum class DataType { F32, BF16, F16, I64, Bool };
KILN_RUNTIME_API const char* dataTypeName(DataType type);  // "f32", "bf16", "f16", "i64", "bool"

// One input or output of the model, as the manifest records it.
struct TensorInfo {
  std::string name;            // the model's name for it (an argument name for inputs)
  std::string dtype;           // dataTypeName(type)
  std::vector<int64_t> shape;
  size_t bytes = 0;            // what a binding must hold
  DataType type = DataType::F32;
};

// What an emitted directory holds, read from its manifest alone (no GPU needed).
struct ModelInfo {
  std::string model;           // the model's name
  std::string kilnVersion;     // the kiln that wrote it
  std::string arch;            // the GPU architecture its cubins are for, e.g. "sm_90a"
  std::vector<TensorInfo> inputs, outputs;
  size_t kernels = 0;
  size_t arenaBytes = 0;       // the compiled plan's arena: weights, inputs, outputs and activations together
  size_t weightBytes = 0;      // device memory a Model allocates for its weights (once, whatever its Sessions)
  size_t sessionBytes = 0;     // device memory each Session allocates: its arena without the weights
};
KILN_RUNTIME_API ModelInfo describe(const std::string& dir);

// Where a run reads an input or writes an output: a host pointer or a device pointer (CUdeviceptr), exactly one,
// and how many bytes it holds. run() refuses a buffer smaller than its tensor (TensorInfo::bytes) with one line instead
// of reading or writing past its end; a larger one is fine (the tensor's bytes are used from its start).
//
// Device buffers are bound in place: the kernels read the caller's input and write the caller's output where they
// are, nothing is copied — when the address is a multiple of 256 bytes (what cudaMalloc and PyTorch's allocator give;
// the kernels' vector loads assume it) and no other buffer of the same run overlaps an output's bytes. A device buffer
// that fails either condition, and every host buffer, is copied into the Session's arena and out again on the run's
// stream instead. The forward's CUDA graph is captured once per set of bound addresses (the last 8 sets are kept), so a
// loop that reuses its buffers replays without capturing again.
struct Buffer {
  static Buffer host(void* p, size_t bytes) { return Buffer{p, 0, bytes}; }
  // Read-only memory: an input only (run() refuses it as an output instead of writing into const memory).
  static Buffer host(const void* p, size_t bytes) { return Buffer{const_cast<void*>(p), 0, bytes, true}; }
  static Buffer device(uint64_t p, size_t bytes) { return Buffer{nullptr, p, bytes}; }
  // Without a size: nothing can be checked, the caller vouches for TensorInfo::bytes. Kept for code written against
  // kiln 0.1's first header; prefer the forms above.
  [[deprecated("give the buffer's size: Buffer::host(p, bytes)")]] static Buffer host(const void* p) {
    return Buffer{const_cast<void*>(p), 0, kUnknownSize};
  }
  [[deprecated("give the buffer's size: Buffer::device(p, bytes)")]] static Buffer device(uint64_t p) {
    return Buffer{nullptr, p, kUnknownSize};
  }
  static constexpr size_t kUnknownSize = ~size_t{0};
  void* hostPtr = nullptr;
  uint64_t devicePtr = 0;
  size_t bytes = 0;
  bool readOnly = false;
};

// Buffers by tensor name (TensorInfo::name), for run()'s named form.
using NamedBuffers = std::vector<std::pair<std::string, Buffer>>;

struct RuntimeOptions {
  int device = 0;  // the CUDA device ordinal to load the model onto
};

struct RunOptions {
  void* stream = nullptr;  // a CUstream / cudaStream_t; nullptr: the Runtime's own non-blocking stream
  // Capture the forward as a CUDA graph on the first run and replay it after: one launch per forward. Off: kernels
  // are launched one by one (still without synchronizing between them).
  bool graph = true;
  // Debugging: synchronize after every kernel, so that a fault names the kernel that caused it. Also turned on
  // by the environment variable KILN_SYNC_EACH_KERNEL=1.
  bool syncEachKernel = false;
};

// A directory written by `kiln compile --emit cuda` loaded onto a GPU: reads DIR/manifest.json, checks the files it
// lists, loads every cubin onto options.device and uploads weights.bin, once. Runs nothing itself: make Sessions.
class KILN_RUNTIME_API Model {
 public:
  explicit Model(const std::string& dir, const RuntimeOptions& options = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelInfo& info() const;
  std::string deviceName() const;  // e.g. "NVIDIA H200"

 private:
  friend class Session;
  struct Impl;
  Impl& live() const;  // impl_, or RuntimeError for a moved-from Model
  std::shared_ptr<Impl> impl_;
};

// One stream of forwards over a Model: allocates its arena (ModelInfo::sessionBytes) on the Model's device.
//
// `entry` runs another entry point of the directory (`kiln compile --emit cuda --prefill-chunk C` writes a decoder's
// step as the first and its prefill chunk as "prefill": manifest.ENTRY.json); it is loaded on first use, sharing the
// Model's weights on the device. A model's state (a KV cache: an input and the output written in place of it, see
// `kiln inspect DIR`) stays in the caller's device memory from one run to the next when both are bound to the same
// address: nothing is copied, and every entry's sessions may share it that way.
class KILN_RUNTIME_API Session {
 public:
  explicit Session(const Model& model, const std::string& entry = "");
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const ModelInfo& info() const;  // its entry's

  // One forward pass, asynchronous on options.stream: inputs are read, the kernels run, outputs are written (bound in
  // place or copied: Buffer). Returns when every host output is written (it synchronizes the stream if any output is a
  // host buffer); with only device outputs it returns at once and the results are ordered on the stream. Buffers in
  // info()'s order, each at least TensorInfo::bytes long.
  void run(const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs, const RunOptions& options = {});
  // The same with every input and output named once (in any order); an unknown, missing or repeated name is an
  // InvalidArgument error naming it and the tensors there are.
  void run(const NamedBuffers& inputs, const NamedBuffers& outputs, const RunOptions& options = {});

 private:
  struct Impl;
  Impl& live() const;
  std::unique_ptr<Impl> impl_;
};

// A Model and one Session on it: the simple case (one thread, one stream of forwards).
class KILN_RUNTIME_API Runtime {
 public:
  explicit Runtime(const std::string& dir, const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const ModelInfo& info() const;
  // As Session::run.
  void run(const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs, const RunOptions& options = {});
  void run(const NamedBuffers& inputs, const NamedBuffers& outputs, const RunOptions& options = {});

  std::string deviceName() const;  // e.g. "NVIDIA H200"

 private:
  struct Impl;
  Impl& live() const;  // impl_, or RuntimeError for a moved-from Runtime
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
