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
// wrong count) throws kiln::RuntimeError whose what() is one line naming the file, kernel or buffer involved.
//
// Lifetimes: a Runtime owns every device resource it makes (the modules, one arena holding weights, inputs,
// activations and outputs, a stream, the captured graph) and frees them in its destructor. It uses the primary
// context of device 0, which the CUDA runtime and frameworks share, so device pointers from cudaMalloc can be bound.
//
// Threads: a Runtime is not thread-safe (one arena: two concurrent runs would overwrite each other); use one per
// thread, or serialize calls. Separate Runtimes (even of the same directory) are independent.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

// What the shared library exports (it is built with hidden visibility; nothing else of kiln is visible).
#define KILN_RUNTIME_API __attribute__((visibility("default")))

namespace kiln {

class KILN_RUNTIME_API RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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

// Where a run reads an input or writes an output: a host pointer or a device pointer (CUdeviceptr), exactly one.
struct Buffer {
  static Buffer host(const void* p) { return Buffer{const_cast<void*>(p), 0}; }  // outputs: writable memory
  static Buffer device(uint64_t p) { return Buffer{nullptr, p}; }
  void* hostPtr = nullptr;
  uint64_t devicePtr = 0;
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
  // Reads DIR/manifest.json, loads every cubin onto device 0, allocates the arena and uploads weights.bin.
  explicit Runtime(const std::string& dir);
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

  std::string deviceName() const;  // e.g. "NVIDIA H200"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
