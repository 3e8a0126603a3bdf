// `kiln run --check --bisect` (src/driver/bisect.cpp): where a failed check went wrong. The run (the Kernel-IR
// interpreter, or the GPU launching kernel by kernel) keeps each buffer that holds a TorchScript value of the forward
// (loop::Buffer::traced) once the last kernel writing it ran;
// LibTorch runs the same forward with those values as extra outputs (frontend::referenceIntermediates); the kernels are
// walked in launch order and the first whose output differs from LibTorch's value is named, with by how much.
// Private to src/driver.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/kernel/ir.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/host_tensor.h"

namespace kiln {

// Buffer id -> its values after the last kernel that writes it, for the buffers with a TorchScript value.
using KeptValues = std::map<int, HostTensor>;

// A buffer's values where the run keeps them (the interpreter's vectors, the GPU's arena), read and written by id.
struct BufferAccess {
  std::function<HostTensor(int buffer)> read;
  std::function<void(int buffer, const HostTensor& values)> write;
};

// What runs after each kernel of a --bisect run: fills `kept` (when not null) with the buffers whose last writer the
// kernel is. With the environment variable KILN_TEST_PERTURB_KERNEL naming a kernel, that kernel's floating-point
// outputs get 1 added to every element first (a fault on purpose, for the tests of --bisect; a line on `out` says so).
class TracedValueKeeper {
 public:
  TracedValueKeeper(const kernel::Program& p, KeptValues* kept, std::ostream& out);
  bool active() const { return kept_ || !perturbed_.empty(); }  // false: nothing to keep or change
  void afterKernel(size_t kernel, const BufferAccess& buffers) const;
  // afterKernel as the interpreter's hook (empty when not active) and as runtime::Model::run's on a GPU (the arena's
  // bytes read and written back). Both refer to this keeper, which must outlive the run.
  kernel::AfterKernel interpreterHook() const;
  std::function<void(size_t kernel)> gpuHook(runtime::Model& model) const;

 private:
  const kernel::Program& p_;
  KeptValues* kept_;
  std::string perturbed_;
  std::vector<int> lastWriter_;  // per buffer: the kernel that writes it last, or -1
};

// How the results are judged: `lowPrecision` (bf16 or f16, the type the model stores) or nullopt for an f32 model.
struct BisectReference {
  std::string model;                 // the .pt LibTorch runs
  std::vector<HostTensor> args;      // the run's inputs
  std::optional<DType> cast;         // --dtype
  std::optional<DType> lowPrecision;
};

// --bisect compares values inside a forward without state: UserError naming `model` when `p` keeps any.
void refuseStateForBisect(const kernel::Program& p, const std::string& model);
// --bisect on a GPU: `p`, compiled again in process, must be the program the manifest was emitted from (the same
// kernels in order, each kept buffer the same name and shape); UserError naming `model` otherwise.
void checkBisectMatchesManifest(const kernel::Program& p, const runtime::Manifest& m, const std::string& model);

// Compares the kept values with LibTorch's (and, for a low-precision model, both with the f32 evaluation, as the
// check's DESIGN.md §4 rule does); prints a summary (every row with `verbose`) and the first kernel whose output
// differs (or, when `checkPassed` is false and none does, the last that agrees), and returns the report's "bisect"
// object.
nlohmann::json bisectKernels(const kernel::Program& p, const KeptValues& kept, const BisectReference& ref, bool checkPassed,
                             bool verbose, std::ostream& out);

}  // namespace kiln
