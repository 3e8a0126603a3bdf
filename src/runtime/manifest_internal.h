// Pieces of manifest.cpp that manifest_states.cpp shares: JSON field access with messages naming the field, and the
// states' and decode interface's parsing, validation and printing (format 7). Not an installed header.
#pragma once
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/runtime/manifest.h"
#include "kiln/support/error.h"

namespace kiln::runtime::detail {

using nlohmann::json;

// A JSON value as an error message shows it: a number, true, false or null as written, a string up to 40 characters,
// an array or object by its size only. Never the dump of a nested value: a manifest nested 75,000 deep overflowed the
// stack while its error message was built, and one 50,000 deep made a 100 KB line (issue 45).
inline std::string shown(const json& v) {
  if (v.is_array()) return fmt::format("an array ({} entries)", v.size());
  if (v.is_object()) return fmt::format("an object ({} fields)", v.size());
  if (!v.is_string()) return v.dump();
  const std::string& text = v.get_ref<const std::string&>();
  const bool cut = text.size() > 40;
  return json(cut ? text.substr(0, 40) : text).dump(-1, ' ', true, json::error_handler_t::replace) + (cut ? "..." : "");
}

// Field access that turns every shape mismatch into a message naming the JSON path ("buffers[2].dtype").
struct Reader {
  const std::string& what;

  const json& field(const json& obj, const std::string& path, const char* key) const {
    if (!obj.is_object()) userError("{}: '{}' must be a JSON object", what, path);
    auto it = obj.find(key);
    if (it == obj.end()) userError("{}: missing field '{}{}{}'", what, path, path.empty() ? "" : ".", key);
    return *it;
  }
  static std::string sub(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }
  std::string str(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_string()) userError("{}: field '{}' must be a string, got {}", what, sub(path, key), shown(v));
    return v.get<std::string>();
  }
  int64_t integer(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) userError("{}: field '{}' must be an integer, got {}", what, path, shown(v));
    return v.get<int64_t>();
  }
  int64_t integer(const json& obj, const std::string& path, const char* key) const {
    return integer(field(obj, path, key), sub(path, key));
  }
  std::vector<int64_t> ints(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    std::string p = sub(path, key);
    if (!v.is_array()) userError("{}: field '{}' must be an array of integers, got {}", what, p, shown(v));
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(integer(v[i], fmt::format("{}[{}]", p, i)));
    return out;
  }
  void dim3(const json& obj, const std::string& path, const char* key, int (&out)[3]) const {
    std::vector<int64_t> v = ints(obj, path, key);
    if (v.size() != 3) userError("{}: field '{}' must have 3 entries, got {}", what, sub(path, key), v.size());
    for (int i = 0; i < 3; ++i) {
      if (v[i] <= 0 || v[i] > INT32_MAX)
        userError("{}: field '{}[{}]' must be in [1, 2^31), got {}", what, sub(path, key), i, v[i]);
      out[i] = static_cast<int>(v[i]);
    }
  }
  bool boolean(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_boolean()) userError("{}: field '{}' must be true or false, got {}", what, sub(path, key), shown(v));
    return v.get<bool>();
  }
  const json& array(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_array()) userError("{}: field '{}' must be an array", what, sub(path, key));
    return v;
  }
};

// Reads "states" and "decode" (format 7) into m where j has them; UserError for either in an older format.
void parseStates(const json& j, Manifest& m, const Reader& r);
// Each state names an input and an output of one dtype and shape, its initial value inside a 64-bit size; the decode
// interface names two i64 inputs of the forward's own that are not states, and non-negative bounds.
void validateStates(const Manifest& m, const std::string& what);
// Writes m's states and decode interface into j (nothing when m has none).
void statesToJson(const Manifest& m, json& j);

}  // namespace kiln::runtime::detail
