#include "decode_gpu.h"

#include <algorithm>

#include "kiln/support/error.h"

namespace kiln {
namespace fs = std::filesystem;

DeviceState::DeviceState(const std::vector<HostTensor>& initial) {
  for (const HostTensor& s : initial) buffers.emplace_back(numel(s.shape) * dtypeBytes(s.dtype));
  holders.assign(buffers.size(), nullptr);
}

GpuEntry::GpuEntry(const fs::path& dir, const std::string& entry, bool filesChecked, int64_t tokens,
                   std::shared_ptr<DeviceState> state, const GpuEntry* sibling)
    : model_(sibling ? runtime::loadEntry(*sibling->model_.loaded(), entry, filesChecked)
                     : runtime::loadModel(dir, filesChecked, entry)),
      tokens_(tokens),
      state_(std::move(state)) {
  const runtime::Manifest& m = model_.manifest();
  const size_t states = state_->buffers.size();
  const std::string where = (dir / runtime::manifestFileName(entry)).string();
  if (!m.states.empty() && m.states.size() != states)
    userError("{}: {} states where the decode step has {}; compile the directory's entries again", where, m.states.size(), states);
  KILN_ASSERT(m.inputs.size() > states && m.outputs.size() > states, "entry {}: {} inputs and {} outputs for {} states", where,
              m.inputs.size(), m.outputs.size(), states);
  for (size_t i = 0; i < states; ++i) {  // the manifest's states, or (written before format 7) its last inputs and outputs
    stateIn_.push_back(m.states.empty() ? m.inputs[m.inputs.size() - states + i] : m.states[i].input);
    stateOut_.push_back(m.states.empty() ? m.outputs[m.outputs.size() - states + i] : m.states[i].output);
    const runtime::BufferInfo* in = m.findBuffer(stateIn_.back());
    const runtime::BufferInfo* out = m.findBuffer(stateOut_.back());
    if (in->bytes != state_->buffers[i].bytes())
      userError("{}: state {} ('{}') is {} bytes where the decode step's is {}; compile the directory's entries again", where,
                i, in->name, in->bytes, state_->buffers[i].bytes());
    inPlace_.push_back(out->inPlaceOf == in->id ? in->id : -1);
  }
  for (int64_t id : m.inputs)
    if (std::find(stateIn_.begin(), stateIn_.end(), id) == stateIn_.end()) ownInputs_.push_back(id);
  for (int64_t id : m.outputs)
    if (std::find(stateOut_.begin(), stateOut_.end(), id) == stateOut_.end()) ownOutputs_.push_back(id);
  auto placesIn = [](const std::vector<int64_t>& all, const std::vector<int64_t>& ids) {
    std::vector<size_t> at;
    for (int64_t id : ids) at.push_back(static_cast<size_t>(std::find(all.begin(), all.end(), id) - all.begin()));
    return at;
  };
  ownInputAt_ = placesIn(m.inputs, ownInputs_);
  ownOutputAt_ = placesIn(m.outputs, ownOutputs_);
  stateInAt_ = placesIn(m.inputs, stateIn_);
  stateOutAt_ = placesIn(m.outputs, stateOut_);
}

GpuEntry::~GpuEntry() {
  try {
    for (size_t i = 0; i < inPlace_.size(); ++i) flush(i);
  } catch (const std::exception&) {  // never throws: the state is lost with the entry
  }
}

void GpuEntry::resetState(const std::vector<HostTensor>& state) {
  for (size_t i = 0; i < state.size(); ++i) {
    state_->buffers[i].upload(toBytes(state[i]));
    state_->holders[i] = nullptr;
  }
}

std::vector<HostTensor> GpuEntry::run(const std::vector<HostTensor>& inputs, bool logits) {
  const runtime::Manifest& m = model_.manifest();
  KILN_ASSERT(inputs.size() == ownInputs_.size(), "{} inputs for an entry taking {}", inputs.size(), ownInputs_.size());
  std::vector<std::vector<std::byte>> in, out;
  for (const HostTensor& t : inputs) in.push_back(toBytes(t));
  for (size_t i = 0; i < ownOutputs_.size(); ++i)
    out.emplace_back(i == 0 && !logits ? 0 : static_cast<size_t>(m.findBuffer(ownOutputs_[i])->bytes));
  // Bindings in the manifest's order: the forward's own tensors from the host (the logits, when not wanted, left in
  // the arena: nothing copied), the states where bindState puts them.
  std::vector<runtime::Binding> inBind(m.inputs.size()), outBind(m.outputs.size());
  for (size_t i = 0; i < ownInputs_.size(); ++i) inBind[ownInputAt_[i]] = runtime::Binding{in[i].data(), 0};
  for (size_t i = 0; i < ownOutputs_.size(); ++i)
    outBind[ownOutputAt_[i]] = i == 0 && !logits ? model_.binding(ownOutputs_[i]) : runtime::Binding{out[i].data(), 0};
  for (size_t i = 0; i < stateIn_.size(); ++i) {
    const runtime::Binding b = bindState(i);
    inBind[stateInAt_[i]] = b;
    outBind[stateOutAt_[i]] = b;
  }
  model_.forward(inBind, outBind);
  std::vector<HostTensor> results;
  for (size_t i = 0; i < ownOutputs_.size(); ++i) {
    const runtime::BufferInfo* b = m.findBuffer(ownOutputs_[i]);
    results.push_back(i == 0 && !logits ? HostTensor{b->dtype, {0}, {}} : fromBytes(b->dtype, b->shape, out[i]));
  }
  return results;
}

// Where state i is bound for this entry's next forward, its current value moved there first where it is elsewhere.
runtime::Binding GpuEntry::bindState(size_t i) {
  GpuEntry*& holder = state_->holders[i];
  if (holder && holder != this) holder->flush(i);
  if (inPlace_[i] < 0) return state_->buffers[i].binding();
  const runtime::Binding own = model_.binding(inPlace_[i]);
  if (holder != this) state_->buffers[i].copyTo(own.device);
  holder = this;
  return own;
}

// State i's current value from this entry's arena into the shared device buffer, if the arena holds it.
void GpuEntry::flush(size_t i) {
  if (state_->holders[i] != this) return;
  state_->buffers[i].copyFrom(model_.binding(inPlace_[i]).device);
  state_->holders[i] = nullptr;
}

}  // namespace kiln
