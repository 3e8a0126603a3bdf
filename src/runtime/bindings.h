// How the public API's buffers become the runtime's bindings (src/runtime/api.cpp), checked before anything touches
// the device: here so that the checks are tested without a GPU (tests/unit/runtime_api_test.cpp).
#pragma once
#include <atomic>
#include <vector>

#include "kiln/kiln_runtime.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime {

// `given` in the order of `tensors` (a model's inputs or outputs; `what` is "input" or "output"), as bindings. Failure
// with ErrorCode::InvalidArgument, one line naming the tensor, for a count other than tensors.size(), a buffer with
// both or neither pointer, one smaller than its tensor, or read-only memory given as an output.
std::vector<Binding> bindInOrder(const std::vector<TensorInfo>& tensors, const std::vector<Buffer>& given,
                                 const char* what);

// The same for buffers given by name: each tensor named exactly once, no other names.
std::vector<Binding> bindByName(const std::vector<TensorInfo>& tensors, const NamedBuffers& given, const char* what);

// Marks a Runtime busy for one run(): a second run() entering while the first is inside fails (InvalidArgument)
// instead of racing on the arena and the captured graph.
class RunGuard {
 public:
  explicit RunGuard(std::atomic<bool>& busy);
  ~RunGuard() { busy_.store(false, std::memory_order_release); }
  RunGuard(const RunGuard&) = delete;
  RunGuard& operator=(const RunGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

// The kind of failure an exception thrown by kiln's runtime code reports to the public API.
ErrorCode errorCodeOf(const std::exception& e);

}  // namespace kiln::runtime
