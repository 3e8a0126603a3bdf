// A manifest's states and decode interface (format 7): what `kiln generate DIR` reads to keep a KV cache between
// forwards and to check its input, without the trace.
#include <algorithm>
#include <fmt/format.h>

#include "kiln/support/checked_int.h"
#include "manifest_internal.h"

namespace kiln::runtime::detail {

void parseStates(const json& j, Manifest& m, const Reader& r) {
  for (const char* field : {"states", "decode"})
    if (j.contains(field) && m.formatVersion < 7)
      userError("{}: '{}' in a manifest of format {} (it came with format 7)", r.what, field, m.formatVersion);
  if (j.contains("states")) {
    const json& states = r.array(j, "", "states");
    for (size_t i = 0; i < states.size(); ++i) {
      const std::string p = fmt::format("states[{}]", i);
      StateInfo s;
      s.name = r.str(states[i], p, "name");
      s.input = r.integer(states[i], p, "input");
      s.output = r.integer(states[i], p, "output");
      s.initialOffset = r.integer(states[i], p, "initial_offset");
      m.states.push_back(std::move(s));
    }
  }
  if (j.contains("decode")) {
    const json& d = r.field(j, "", "decode");
    DecodeInfo info;
    info.tokenInput = r.integer(d, "decode", "token_input");
    info.positionInput = r.integer(d, "decode", "position_input");
    info.cachePositions = r.integer(d, "decode", "cache_positions");
    info.vocabulary = r.integer(d, "decode", "vocabulary");
    m.decode = info;
  }
}

namespace {

// The buffer `id` if it is one of `ids` (the manifest's inputs or outputs), else UserError naming `field`.
const BufferInfo& listedBuffer(const Manifest& m, const std::vector<int64_t>& ids, int64_t id, const std::string& field,
                               const char* list, const std::string& what) {
  const BufferInfo* b = m.findBuffer(id);
  if (!b || std::find(ids.begin(), ids.end(), id) == ids.end())
    userError("{}: {} is buffer id {}, which is not one of the manifest's {}", what, field, id, list);
  return *b;
}

bool isStateInput(const Manifest& m, int64_t id) {
  return std::any_of(m.states.begin(), m.states.end(), [&](const StateInfo& s) { return s.input == id; });
}

}  // namespace

void validateStates(const Manifest& m, const std::string& what) {
  std::vector<int64_t> inputs, outputs;
  for (size_t i = 0; i < m.states.size(); ++i) {
    const StateInfo& s = m.states[i];
    const std::string p = fmt::format("states[{}] ('{}')", i, s.name);
    const BufferInfo& in = listedBuffer(m, m.inputs, s.input, p + ".input", "inputs", what);
    const BufferInfo& out = listedBuffer(m, m.outputs, s.output, p + ".output", "outputs", what);
    if (in.dtype != out.dtype || in.shape != out.shape)
      userError("{}: {}: its input {} ('{}') and output {} ('{}') differ in dtype or shape", what, p, in.id, in.name, out.id,
                out.name);
    if (s.initialOffset < 0 || !checkedAdd(s.initialOffset, in.bytes))
      userError("{}: {}: initial_offset must be non-negative with its end inside a 64-bit size, got {}", what, p,
                s.initialOffset);
    if (std::count(inputs.begin(), inputs.end(), s.input) || std::count(outputs.begin(), outputs.end(), s.output))
      userError("{}: {}: its input or output is another state's too", what, p);
    inputs.push_back(s.input);
    outputs.push_back(s.output);
  }
  if (!m.decode) return;
  const DecodeInfo& d = *m.decode;
  for (const auto& [id, field] : {std::pair{d.tokenInput, "decode.token_input"}, std::pair{d.positionInput, "decode.position_input"}}) {
    const BufferInfo& b = listedBuffer(m, m.inputs, id, field, "inputs", what);
    if (b.dtype != DType::I64 || isStateInput(m, id))
      userError("{}: {} is buffer {} ('{}'), which is not an i64 input of the forward's own (a state, or {})", what, field,
                id, b.name, dtypeName(b.dtype));
  }
  if (d.tokenInput == d.positionInput) userError("{}: decode.token_input and decode.position_input are one buffer", what);
  if (d.cachePositions < 0 || d.vocabulary < 0)
    userError("{}: decode.cache_positions and decode.vocabulary must be >= 0, got {} and {}", what, d.cachePositions,
              d.vocabulary);
}

void statesToJson(const Manifest& m, json& j) {
  if (!m.states.empty()) {
    json states = json::array();
    for (const StateInfo& s : m.states)
      states.push_back({{"name", s.name}, {"input", s.input}, {"output", s.output}, {"initial_offset", s.initialOffset}});
    j["states"] = std::move(states);
  }
  if (m.decode)
    j["decode"] = {{"token_input", m.decode->tokenInput}, {"position_input", m.decode->positionInput},
                   {"cache_positions", m.decode->cachePositions}, {"vocabulary", m.decode->vocabulary}};
}

}  // namespace kiln::runtime::detail
