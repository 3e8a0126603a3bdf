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
// without a GPU; describe() works there, and Runtime's constructor then fails with a RuntimeError saying why.
//
// Errors: every failure (a malformed directory, a cubin built for another GPU, a Driver API error, a binding of the
// wrong count, size or name) throws kiln::RuntimeError whose what() is one line naming the file, kernel or buffer
// involved, and whose code() says which kind of failure it is.
//
// Lifetimes: a Runtime owns every device resource it makes (the modules, one arena holding weights, inputs,
// activations and outputs, a stream, the captured graph) and frees them in its destructor. It uses the primary
// context of its device (RuntimeOptions::device, 0 by default), which the CUDA runtime and frameworks share, so device
// pointers from cudaMalloc on that device can be bound. A Runtime that was moved from holds nothing: every member but
// assignment and destruction throws RuntimeError (ErrorCode::InvalidArgument) instead of touching freed state.
//
// Threads: a Runtime is not thread-safe (one arena: two concurrent runs would overwrite each other); use one per
// thread, or serialize calls: a run() that starts while another is still in run() on the same Runtime throws
// RuntimeError (ErrorCode::InvalidArgument) rather than racing. Separate Runtimes (even of the same directory) are
// independent. info() returns a reference into the Runtime: it lives as long as the Runtime does.
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

// One input or output of the model, as the manifest records it.
struct TensorInfo {
  std::string name;            // the model's name for it (an argument name for inputs)
  std::string dtype;           // "f32", "bf16", "f16", "i64", "bool"
  std::vector<int64_t> shape;
  size_t bytes = 0;            // what a binding must hold
};

// What an emitted directory holds, read from its manifest alone (no GPU needed).
struct ModelInfo {
  std::string model;           // the model's name
  std::string kilnVersion;     // the kiln that wrote it
  std::string arch;            // the GPU architecture its cubins are for, e.g. "sm_90a"
  std::vector<TensorInfo> inputs, outputs;
  size_t kernels = 0;
  size_t arenaBytes = 0;       // device memory a Runtime allocates
};
KILN_RUNTIME_API ModelInfo describe(const std::string& dir);

// Where a run reads an input or writes an output: a host pointer or a device pointer (CUdeviceptr), exactly one,
// and how many bytes it holds. run() refuses a buffer smaller than its tensor (TensorInfo::bytes) with one line instead
// of reading or writing past its end; a larger one is fine (the tensor's bytes are used from its start).
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

class KILN_RUNTIME_API Runtime {
 public:
  // Reads DIR/manifest.json, loads every cubin onto options.device, allocates the arena and uploads weights.bin.
  explicit Runtime(const std::string& dir, const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const ModelInfo& info() const;

  // One forward pass, asynchronous on options.stream: inputs are copied in, the kernels run, the outputs are copied
  // out. Returns when every host output is written (it synchronizes the stream if any output is a host buffer);
  // with only device outputs it returns at once and the results are ordered on the stream. Buffers in info()'s
  // order, each at least TensorInfo::bytes long.
  void run(const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs, const RunOptions& options = {});
  // The same with every input and output named once (in any order); an unknown, missing or repeated name is an
  // InvalidArgument error naming it and the tensors there are.
  void run(const NamedBuffers& inputs, const NamedBuffers& outputs, const RunOptions& options = {});

  std::string deviceName() const;  // e.g. "NVIDIA H200"

 private:
  struct Impl;
  Impl& live() const;  // impl_, or RuntimeError for a moved-from Runtime
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
