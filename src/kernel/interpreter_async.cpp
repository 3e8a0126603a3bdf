// The Kernel-IR interpreter's cp.async (interpreter_machine.h). A copy reads global memory when issued and
// lands in shared memory only when its thread waits for its group; until then any read or write of the
// destination by any thread is an error. A landed element is visible to the waiting thread at once and to the
// rest of the block after the next barrier (cp.async.wait_group orders only the executing thread's copies;
// __syncthreads after it is what publishes them), so a missing barrier is an error too.
#include <fmt/format.h>

#include <algorithm>

#include "interpreter_machine.h"

namespace kiln::kernel::interp {

void Machine::resetAsync() {
  inFlight.resize(k.shared.size());
  landed.resize(k.shared.size());
  for (size_t b = 0; b < k.shared.size(); ++b) {
    inFlight[b].assign(static_cast<size_t>(k.shared[b].elements), -1);
    landed[b].assign(static_cast<size_t>(k.shared[b].elements), -1);
  }
  openGroup.assign(static_cast<size_t>(T), {});
  committed.assign(static_cast<size_t>(T), {});
}

void Machine::checkSharedRead(int buffer, int64_t i, int64_t t) {
  if (k.shared[buffer].mbarriers) raise(fmt::format("kernel {}: thread {} of block {} reads mbarrier {}[{}] as a float", k.name, t, block,
                                                    k.shared[buffer].name, i));
  if (mbarrierUsed) checkPhaseTag(buffer, i, t);
  if (!async) return;
  if (int32_t owner = inFlight[buffer][i]; owner >= 0)
    raise(fmt::format("kernel {}: thread {} of block {}: read of shared memory whose cp.async has not been waited for: {}[{}] "
                      "(copied by thread {})", k.name, t, block, k.shared[buffer].name, i, owner));
  if (int32_t owner = landed[buffer][i]; owner >= 0 && owner != t)
    raise(fmt::format("kernel {}: thread {} of block {} reads shared {}[{}], which thread {}'s cp.async wrote, with no barrier "
                      "after that thread's wait", k.name, t, block, k.shared[buffer].name, i, owner));
}

void Machine::checkSharedWrite(int buffer, int64_t i, int64_t t) {
  if (wgmmaUsed) noteSharedWrite(buffer, i, t);
  if (k.shared[buffer].mbarriers) raise(fmt::format("kernel {}: thread {} of block {} writes mbarrier {}[{}] as a float", k.name, t, block,
                                                    k.shared[buffer].name, i));
  if (mbarrierUsed) phaseTags[buffer][static_cast<size_t>(i)] = PhaseTag{};
  if (!async) return;
  if (int32_t owner = inFlight[buffer][i]; owner >= 0)
    raise(fmt::format("kernel {}: thread {} of block {} stores to shared {}[{}] while thread {}'s cp.async into it has not "
                      "been waited for", k.name, t, block, k.shared[buffer].name, i, owner));
  landed[buffer][i] = -1;
}

void Machine::cpAsyncStep(const Stmt& stmt, const std::vector<uint8_t>& mask) {
  const auto& s = stmt.as<op::CpAsync>();
  KILN_ASSERT(s.shared >= 0 && s.shared < static_cast<int>(k.shared.size()) && s.param >= 0 &&
                  s.param < static_cast<int>(k.params.size()),
              "kernel {}: cp.async from parameter #{} into shared buffer #{}", k.name, s.param, s.shared);
  const SharedBuffer& sb = k.shared[s.shared];
  if (sb.mbarriers) raise(fmt::format("kernel {}: cp.async into mbarriers {}", k.name, sb.name));
  const Param& prm = k.params[s.param];
  const int64_t elemBytes = dtypeBytes(sb.dtype);
  if (prm.dtype != sb.dtype || s.bytes % elemBytes != 0)
    raise(fmt::format("kernel {}: cp.async{} copies {} {} into shared {} of {}", k.name, s.bytes, dtypeName(prm.dtype), prm.name,
                      sb.name, dtypeName(sb.dtype)));
  const int64_t n = s.bytes / elemBytes;
  const std::vector<float>& src = paramData(s.param);
  std::vector<float>& dst = shared[s.shared];
  for (int64_t t = 0; t < T; ++t) {
    if (!mask[t]) continue;
    const int64_t si = evaluate(s.sharedIndex, env[t], &loader), gi = evaluate(s.globalIndex, env[t], &loader);
    const int64_t valid = s.validBytes ? evaluate(s.validBytes, env[t], &loader) : s.bytes;
    auto where = [&] { return fmt::format("kernel {}: thread {} of block {}: cp.async{} shared {}[{}] <- {}[{}]", k.name, t, block,
                                          s.bytes, sb.name, si, prm.name, gi); };
    if (valid < 0 || valid > s.bytes || valid % elemBytes != 0)
      raise(fmt::format("{}: {} valid bytes (want a multiple of {} in 0..{})", where(), valid, elemBytes, s.bytes));
    if (si % n != 0 || gi % n != 0)
      raise(fmt::format("{}: misaligned (both element indices must be multiples of {})", where(), n));
    if (si < 0 || si + n > static_cast<int64_t>(dst.size()))
      raise(fmt::format("{}: out of bounds of the shared buffer's {} elements", where(), dst.size()));
    const int64_t read = valid / elemBytes;
    if (read > 0 && (gi < 0 || gi + read > static_cast<int64_t>(src.size())))
      raise(fmt::format("{}: reads [{}, {}], out of bounds of {}'s {} elements", where(), gi, gi + read - 1, prm.name, src.size()));
    Copy copy{s.shared, si, std::vector<float>(static_cast<size_t>(n), 0.f)};  // zero-filled past the valid bytes
    for (int64_t j = 0; j < read; ++j) copy.values[j] = src[gi + j];
    countRead(s.param, read);
    for (int64_t j = 0; j < n; ++j) {
      if (int32_t owner = inFlight[s.shared][si + j]; owner >= 0)
        raise(fmt::format("{}: overlaps element {} of thread {}'s copy that has not been waited for", where(), si + j, owner));
      if (wgmmaUsed && pinned[s.shared][si + j] > 0)
        raise(fmt::format("{}: element {} is read by a wgmma that has not been waited for", where(), si + j));
      inFlight[s.shared][si + j] = static_cast<int32_t>(t);
      if (mbarrierUsed) phaseTags[s.shared][static_cast<size_t>(si + j)] = PhaseTag{};
    }
    openGroup[t].push_back(std::move(copy));
  }
}

void Machine::cpAsyncCommitStep(const std::vector<uint8_t>& mask) {
  for (int64_t t = 0; t < T; ++t)
    if (mask[t] && async) {
      committed[t].push_back(std::move(openGroup[t]));
      openGroup[t].clear();
    }
}

void Machine::cpAsyncWaitStep(const Stmt& s, const std::vector<uint8_t>& mask) {
  if (!async) return;
  for (int64_t t = 0; t < T; ++t) {
    if (!mask[t]) continue;
    while (static_cast<int64_t>(committed[t].size()) > s.as<op::CpAsyncWait>().pendingGroups) {
      for (const Copy& c : committed[t].front()) landCopy(c, t, static_cast<int32_t>(t), nullptr);
      committed[t].pop_front();
    }
  }
}

// Copy c of thread t lands: its values in shared memory, no longer in flight; landedBy: the thread whose later
// barrier publishes it (-1: published by the mbarrier phase `tag`, which it is then tagged with).
void Machine::landCopy(const Copy& c, int64_t t, int32_t landedBy, const PhaseTag* tag) {
  for (size_t j = 0; j < c.values.size(); ++j) {
    const int64_t e = c.start + static_cast<int64_t>(j);
    shared[c.buffer][e] = c.values[j];
    written[c.buffer][e] = 1;
    inFlight[c.buffer][e] = -1;
    landed[c.buffer][e] = landedBy;
    if (tag) phaseTags[c.buffer][static_cast<size_t>(e)] = *tag;
    if (wgmmaUsed) unfenced[c.buffer][e] = static_cast<int32_t>(t) + 1;
  }
}

void Machine::barrierStep() {
  if (mbarrierUsed) publishMbarriers();
  if (!async) return;
  for (auto& l : landed) std::fill(l.begin(), l.end(), -1);
}

}  // namespace kiln::kernel::interp
