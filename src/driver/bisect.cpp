#include "bisect.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "kiln/frontend/frontend.h"
#include "kiln/support/error.h"

namespace kiln {
using json = nlohmann::json;

namespace {

bool isFloat(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The kernel that writes buffer b last (launch order), or -1.
std::vector<int> lastWriters(const kernel::Program& p) {
  std::vector<int> last(p.buffers.size(), -1);
  for (size_t k = 0; k < p.kernels.size(); ++k)
    for (const kernel::Param& param : p.kernels[k].params)
      if (param.written) last[static_cast<size_t>(param.buffer)] = static_cast<int>(k);
  return last;
}

// One kept value against LibTorch's: whether it passes and the figures, in the check's words.
struct Verdict {
  bool comparable = false, pass = false;
  double relL2 = 0;
  std::string rule;  // "tolerance 1e-05" or "against f32: kiln 3.1e-03, LibTorch 2.9e-03"
};

Verdict judge(const HostTensor& kiln, const HostTensor& direct, const HostTensor* f32, const BisectReference& ref) {
  Verdict v;
  if (kiln.shape != direct.shape || isFloat(kiln.dtype) != isFloat(direct.dtype)) return v;  // another layout or kind
  v.comparable = true;
  const Comparison cmp = compare(kiln, direct);
  v.relL2 = cmp.relL2;
  if (!isFloat(kiln.dtype)) {
    v.pass = passes(cmp, kiln.dtype);
    v.rule = "exact";
  } else if (ref.lowPrecision && f32 && f32->shape == kiln.shape) {
    const Comparison kilnErr = compare(kiln, *f32), torchErr = compare(direct, *f32);
    v.pass = passesAgainstF32(kilnErr, torchErr);
    v.rule = fmt::format("against f32: kiln {:.2e}, LibTorch {:.2e} (kiln may reach {:.2e})", kilnErr.relL2, torchErr.relL2,
                         kLowPrecisionErrorRatio * torchErr.relL2 + kLowPrecisionErrorSlack);
  } else {
    const DType type = ref.lowPrecision ? *ref.lowPrecision : DType::F32;
    v.pass = passes(cmp, type);
    v.rule = fmt::format("tolerance {:.0e}", tolerance(type));
  }
  if (cmp.nonFiniteMismatches > 0) v.rule += fmt::format("; NaN/Inf at {} positions where LibTorch has another value", cmp.nonFiniteMismatches);
  return v;
}

}  // namespace

TracedValueKeeper::TracedValueKeeper(const kernel::Program& p, KeptValues* kept, std::ostream& out)
    : p_(p), kept_(kept), lastWriter_(lastWriters(p)) {
  const char* env = std::getenv("KILN_TEST_PERTURB_KERNEL");
  perturbed_ = env ? env : "";
  if (!perturbed_.empty())
    out << fmt::format("kiln: KILN_TEST_PERTURB_KERNEL: adding 1 to every element kernel {} writes (a fault on purpose)\n",
                       printable(perturbed_));
}

void TracedValueKeeper::afterKernel(size_t k, const BufferAccess& buffers) const {
  const kernel::Kernel& kernel = p_.kernels[k];
  for (const kernel::Param& param : kernel.params) {
    if (!param.written) continue;
    const loop::Buffer& info = p_.buffers[static_cast<size_t>(param.buffer)];
    const bool keep = kept_ && lastWriter_[static_cast<size_t>(param.buffer)] == static_cast<int>(k) && !info.traced.empty();
    const bool perturb = kernel.name == perturbed_ && isFloat(info.dtype);
    if (!keep && !perturb) continue;
    HostTensor values = buffers.read(param.buffer);
    if (perturb) {
      for (float& x : values.values) x += 1.f;
      buffers.write(param.buffer, values);
    }
    if (keep) (*kept_)[param.buffer] = std::move(values);
  }
}

kernel::AfterKernel TracedValueKeeper::interpreterHook() const {
  if (!active()) return {};
  return [this](size_t k, std::vector<std::vector<float>>& buffers) {
    afterKernel(k, {[&](int b) { return HostTensor{p_.buffers[b].dtype, p_.buffers[b].shape, buffers[b]}; },
                    [&](int b, const HostTensor& t) { buffers[b] = t.values; }});
  };
}

std::function<void(size_t)> TracedValueKeeper::gpuHook(runtime::Model& model) const {
  return [this, &model](size_t k) {
    afterKernel(k, {[&](int b) { return fromBytes(p_.buffers[b].dtype, p_.buffers[b].shape, model.readBuffer(b)); },
                    [&](int b, const HostTensor& t) { model.writeBuffer(b, toBytes(t)); }});
  };
}

void refuseStateForBisect(const kernel::Program& p, const std::string& model) {
  if (!p.inPlace.empty())
    userError("--bisect compares the values inside a forward without state; {} keeps {} state(s) (a cache): check it "
              "without --bisect", model, p.inPlace.size());
}

void checkBisectMatchesManifest(const kernel::Program& p, const runtime::Manifest& m, const std::string& model) {
  bool same = p.kernels.size() == m.kernels.size();
  for (size_t k = 0; same && k < p.kernels.size(); ++k) same = p.kernels[k].name == m.kernels[k].name;
  for (size_t b = 0; same && b < p.buffers.size(); ++b) {
    const runtime::BufferInfo* info = m.findBuffer(static_cast<int64_t>(b));
    same = p.buffers[b].traced.empty() || (info && info->name == p.buffers[b].name && info->shape == p.buffers[b].shape);
  }
  if (!same)
    userError("--bisect: the kernels kiln runs for {} are not those it compiles now (a cache entry of another kiln?): clear "
              "the cache entry ($KILN_CACHE_DIR) or bisect with --interpret", model);
  refuseStateForBisect(p, model);
}

json bisectKernels(const kernel::Program& p, const KeptValues& kept, const BisectReference& ref, bool checkPassed,
                   bool verbose, std::ostream& out) {
  std::vector<std::string> names;
  for (const auto& [b, value] : kept) names.push_back(p.buffers[static_cast<size_t>(b)].traced);
  const auto direct = frontend::referenceIntermediates(ref.model, ref.args, names, false, ref.cast);
  std::map<std::string, frontend::TracedValue> f32;
  if (ref.lowPrecision) f32 = frontend::referenceIntermediates(ref.model, ref.args, names, false, ref.cast, /*inF32=*/true);
  const std::vector<int> last = lastWriters(p);
  json report{{"values", json::array()}, {"first_difference", nullptr}};
  int compared = 0, lastAgreeing = -1;
  std::vector<std::string> rows;
  for (size_t k = 0; k < p.kernels.size() && report["first_difference"].is_null(); ++k) {
    bool agrees = false;  // the kernel has an output compared, and every one passed
    for (const auto& [b, value] : kept) {
      const loop::Buffer& info = p.buffers[static_cast<size_t>(b)];
      auto it = direct.find(info.traced);
      if (last[static_cast<size_t>(b)] != static_cast<int>(k) || it == direct.end()) continue;
      auto f = f32.find(info.traced);
      const Verdict v = judge(value, it->second.value, f == f32.end() ? nullptr : &f->second.value, ref);
      if (!v.comparable) continue;
      ++compared;
      const json row{{"kernel", p.kernels[k].name}, {"buffer", info.name}, {"value", it->second.name}, {"op", it->second.op},
                     {"rel_l2", std::isfinite(v.relL2) ? json(v.relL2) : json(nullptr)}, {"rule", v.rule}, {"passed", v.pass}};
      report["values"].push_back(row);
      rows.push_back(fmt::format("  {} writes {}, the value of {} ({}): rel_l2 {:.3e} ({}) {}", p.kernels[k].name, info.name,
                                 it->second.op, it->second.name, v.relL2, v.rule, v.pass ? "PASS" : "FAIL"));
      if (!v.pass && report["first_difference"].is_null()) report["first_difference"] = row;
      agrees = true;
    }
    if (agrees && report["first_difference"].is_null()) lastAgreeing = static_cast<int>(k);
  }
  report["compared"] = compared;
  out << fmt::format("kiln: bisect: {} kernel outputs compared with LibTorch's values of the same TorchScript values (the "
                     "others hold fused, partial or re-laid-out values)\n", compared);
  if (verbose)
    for (const std::string& row : rows) out << row << "\n";
  const json& first = report["first_difference"];
  if (first.is_null()) {
    out << "kiln: bisect: every compared kernel output agrees with LibTorch"
        << (!checkPassed && lastAgreeing >= 0
                ? fmt::format("; the difference arises after {}, in a kernel whose output LibTorch has no value of\n",
                              p.kernels[static_cast<size_t>(lastAgreeing)].name)
                : "\n");
    return report;
  }
  if (!verbose) out << rows.back() << "\n";
  out << fmt::format("kiln: bisect: the first kernel whose output differs from LibTorch's: {} (it writes {}, the value of {}), "
                     "after {}\n", first["kernel"].get<std::string>(), first["buffer"].get<std::string>(), first["op"].get<std::string>(),
                     lastAgreeing >= 0 ? fmt::format("{}, the last that agrees", p.kernels[static_cast<size_t>(lastAgreeing)].name)
                                       : std::string("no kernel output that agrees"));
  return report;
}

}  // namespace kiln
