// kiln generate's entry points on the GPU (generate.cpp): a compiled entry of a decoder step run by runtime::Model,
// the model's state kept in device memory its entries share. Not an installed header.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kiln/driver/generate.h"
#include "kiln/runtime/runtime.h"

namespace kiln {

class GpuEntry;

// The state on the GPU: one device buffer per state, and for each the entry whose arena holds its current value
// instead (a state its forward updates in place: BufferInfo::inPlaceOf), or none.
struct DeviceState {
  std::vector<runtime::DeviceBuffer> buffers;
  std::vector<GpuEntry*> holders;
  explicit DeviceState(const std::vector<HostTensor>& initial);  // buffers of the states' sizes (not yet uploaded)
};

// An entry point of a compiled directory (kiln run's compile cache, or one kiln compile --emit cuda wrote), `entry`
// naming its manifest (runtime::manifestFileName): the forward's own inputs copied in from the host and its outputs
// out (the logits), the kernels replayed from one CUDA graph. The states are the manifest's (format 7), or where it
// lists none, its last inputs and outputs pairwise. A state the entry updates in place stays in its arena from one
// step to the next (bound as Model::binding, nothing copied); it reaches the shared device buffer only when another
// entry needs it (flush). Any other state is bound from the device buffer, copied into the arena and out again on the
// GPU, never through the host.
class GpuEntry : public DecodeEntry {
 public:
  // `sibling`: another entry of the same directory, whose weights on the device this one shares (none: uploaded).
  GpuEntry(const std::filesystem::path& dir, const std::string& entry, bool filesChecked, int64_t tokens,
           std::shared_ptr<DeviceState> state, const GpuEntry* sibling = nullptr);
  ~GpuEntry() override;
  int64_t tokens() const override { return tokens_; }
  size_t kernels() const { return model_.manifest().kernels.size(); }
  bool holdsState() const override { return true; }
  void resetState(const std::vector<HostTensor>& state) override;
  std::vector<HostTensor> run(const std::vector<HostTensor>& inputs, bool logits) override;

 private:
  runtime::Binding bindState(size_t i);
  void flush(size_t i);

  runtime::Model model_;
  int64_t tokens_;
  std::shared_ptr<DeviceState> state_;
  std::vector<int64_t> stateIn_, stateOut_;  // per state: its input and output buffer ids
  std::vector<int64_t> inPlace_;             // per state: the input buffer id its forward updates in place, or -1
  std::vector<int64_t> ownInputs_, ownOutputs_;  // the forward's own inputs and outputs (not states), in order
  // Where each of those, and each state's input and output, stands among the manifest's inputs or outputs (forward()'s
  // binding order): worked out once, not at every step.
  std::vector<size_t> ownInputAt_, ownOutputAt_, stateInAt_, stateOutAt_;
};

}  // namespace kiln
