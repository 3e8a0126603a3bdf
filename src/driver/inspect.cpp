// `kiln inspect MODEL.pt` (see commands.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ostream>
#include <set>
#include <sstream>

#include "kiln/driver/commands.h"
#include "kiln/frontend/frontend.h"
#include "kiln/tensor/op_catalog.h"
#include "kiln/tensor/ir.h"

namespace kiln {
namespace {

std::string bytesText(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  const char* unit[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  return fmt::format("{} bytes ({:.1f} {})", bytes, v, unit[u]);
}

std::string tensorsText(const frontend::ModelSummary::Tensors& t) {
  if (t.count == 0) return "none";
  std::vector<std::string> types;
  for (auto& [d, n] : t.dtypes) types.push_back(fmt::format("{} {}", d, n));
  return fmt::format("{} tensor{}, {} elements, {} ({})", t.count, t.count == 1 ? "" : "s", t.elements, bytesText(t.bytes),
                     fmt::join(types, ", "));
}

int64_t nodes(const std::map<std::string, int64_t>& ops) {
  int64_t n = 0;
  for (auto& [op, count] : ops) n += count;
  return n;
}

nlohmann::json tensorsJson(const frontend::ModelSummary::Tensors& t) {
  return {{"count", t.count}, {"elements", t.elements}, {"bytes", t.bytes}, {"dtypes", t.dtypes}};
}

// inspect's facts as one object: {"model", "path", "inputs_recorded", "inputs": [{"name", "dtype", "shape"} or
// {"name", "example"}], "parameters", "buffers": {"count", "elements", "bytes", "dtypes"}, "ops": [{"op", "count",
// "supported"}], "state": [...], "state_writes": [{"op", "count", "supported"}], "folded_ops": [{"op", "count"}],
// "unsupported": [...]}.
nlohmann::json inspectJson(const InspectCommand& c, const frontend::ModelSummary& s, const std::set<std::string>& known) {
  nlohmann::json j = {{"model", s.name}, {"path", c.model}, {"inputs_recorded", s.inputsRecorded}};
  j["inputs"] = nlohmann::json::array();
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const frontend::InputSpec& in = s.inputs[i];
    if (s.inputsRecorded) j["inputs"].push_back({{"name", in.name}, {"dtype", dtypeName(in.dtype)}, {"shape", in.shape}});
    else j["inputs"].push_back({{"name", in.name}, {"example", s.examples[i]}});
  }
  j["parameters"] = tensorsJson(s.parameters);
  j["buffers"] = tensorsJson(s.buffers);
  std::vector<std::string> unsupported;
  j["ops"] = nlohmann::json::array();
  for (auto& [op, n] : s.ops) {
    const bool ok = known.count(op) > 0;
    if (!ok) unsupported.push_back(op);
    j["ops"].push_back({{"op", op}, {"count", n}, {"supported", ok}});
  }
  j["state"] = s.states;
  j["state_writes"] = nlohmann::json::array();
  const auto& writes = frontend::supportedStateWrites();
  for (auto& [op, n] : s.stateWrites) {
    const bool ok = std::find(writes.begin(), writes.end(), op) != writes.end();
    if (!ok) unsupported.push_back(op);
    j["state_writes"].push_back({{"op", op}, {"count", n}, {"supported", ok}});
  }
  j["folded_ops"] = nlohmann::json::array();
  for (auto& [op, n] : s.folded) j["folded_ops"].push_back({{"op", op}, {"count", n}});
  j["unsupported"] = unsupported;
  return j;
}

}  // namespace

// The report: names and ops as the .pt spells them, which kiln prints with any control byte as \xHH (runInspect).
static int inspectReport(const InspectCommand& c, std::ostream& out) {
  frontend::ModelSummary s = frontend::inspectModel(c.model);
  auto supported = tensor::supportedOps();
  std::set<std::string> known(supported.begin(), supported.end());
  // In-place forms of the lowered ops (clamp_, div_, copy_, scatter_, ...): the import takes them as their functional
  // forms where the change is private or written through slices of a fresh tensor (docs/ops.md), and refuses the rest
  // in one line when compiling.
  for (const tensor::OpEntry& e : tensor::opCatalog())
    if (!e.atImport) known.insert(std::string(e.name) + "_");
  if (c.json) {
    out << inspectJson(c, s, known).dump(2) << "\n";
    return 0;
  }

  out << fmt::format("model {} ({})\n", s.name, c.model);
  if (s.inputsRecorded) {
    out << fmt::format("inputs: {}, recorded in kiln_inputs.json (--input NAME=SHAPE[:DTYPE] overrides them)\n", s.inputs.size());
    for (auto& in : s.inputs) out << fmt::format("  {:<20} {}[{}]\n", in.name, dtypeName(in.dtype), shapeString(in.shape));
  } else {
    out << fmt::format("inputs: {}, no shapes recorded (no kiln_inputs.json: a plain torch.jit.trace); give each with "
                       "--input NAME=SHAPE[:DTYPE]\n", s.inputs.size());
    for (size_t i = 0; i < s.inputs.size(); ++i)
      out << fmt::format("  {:<20} e.g. --input {}\n", s.inputs[i].name, s.examples[i]);
  }
  out << fmt::format("parameters: {}\n", tensorsText(s.parameters));
  out << fmt::format("buffers: {}\n", tensorsText(s.buffers));

  std::vector<std::string> unsupported;
  out << fmt::format("ops on input data (kiln lowers these): {} kinds, {} nodes\n", s.ops.size(), nodes(s.ops));
  for (auto& [op, n] : s.ops) {
    bool ok = known.count(op) > 0;
    if (!ok) unsupported.push_back(op);
    out << fmt::format("  {:<36} {:>5}{}\n", op, n, ok ? "" : "  not supported");
  }
  if (!s.states.empty()) {
    out << fmt::format("state (buffers the forward writes in place, inputs and outputs of the compiled model): {}\n",
                       fmt::join(s.states, ", "));
    const auto& writes = frontend::supportedStateWrites();
    for (auto& [op, n] : s.stateWrites) {
      bool ok = std::find(writes.begin(), writes.end(), op) != writes.end();
      if (!ok) unsupported.push_back(op);
      out << fmt::format("  {:<36} {:>5}{}\n", op, n, ok ? "" : "  not supported on state");
    }
  }
  out << fmt::format("ops on constants and shapes only (evaluated at import): {} kinds, {} nodes\n", s.folded.size(),
                     nodes(s.folded));
  for (auto& [op, n] : s.folded) out << fmt::format("  {:<36} {:>5}\n", op, n);
  if (unsupported.empty()) out << "kiln supports every op on input data\n";
  else
    out << fmt::format("not supported by kiln: {}; see docs/ops.md (`kiln ops` lists the supported ones)\n",
                       fmt::join(unsupported, ", "));
  return 0;
}

int runInspect(const InspectCommand& c, std::ostream& out) {
  std::ostringstream report;
  const int code = inspectReport(c, report);
  out << printableLines(report.str());
  return code;
}

}  // namespace kiln
