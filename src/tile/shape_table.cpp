// --product-shapes: product shapes chosen outside kiln's models (tile/ir.h, TabledShape).
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/support/files.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

std::vector<TabledShape> readProductShapes(const std::string& path) {
  if (std::string what = notARegularFile(path); !what.empty())
    userError("--product-shapes: '{}' is {}, not a file; give a JSON file {{\"products\": [...]}}", printable(path), what);
  std::ifstream in(path);
  if (!in) userError("--product-shapes: cannot read '{}'; give a JSON file {{\"products\": [...]}}", printable(path));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const std::exception& e) {
    userError("--product-shapes: '{}' is not JSON ({}); give {{\"products\": [...]}}", printable(path), printable(e.what()));
  }
  if (!j.is_object() || !j.contains("products") || !j["products"].is_array())
    userError("--product-shapes: '{}' has no \"products\" list; give {{\"products\": [{{\"type\": \"f32\", \"m\": ..., ...}}]}}",
              printable(path));
  std::vector<TabledShape> out;
  for (size_t i = 0; i < j["products"].size(); ++i) {
    const nlohmann::json& e = j["products"][i];
    TabledShape t;
    t.where = fmt::format("'{}' entry {}", printable(path), i);
    auto number = [&](const char* key, bool required, int64_t low, int64_t high, int64_t fallback) -> int64_t {
      if (!e.is_object() || !e.contains(key)) {
        if (required) userError("--product-shapes: {} has no \"{}\" (an integer)", t.where, key);
        return fallback;
      }
      const nlohmann::json& v = e[key];
      if (!v.is_number_integer() || v.get<int64_t>() < low || v.get<int64_t>() > high)
        userError("--product-shapes: {}: \"{}\" must be an integer from {} to {}", t.where, key, low, high);
      return v.get<int64_t>();
    };
    if (!e.is_object() || !e.contains("type") || !e["type"].is_string() ||
        (e["type"] != "f32" && e["type"] != "bf16" && e["type"] != "f16"))
      userError("--product-shapes: {}: \"type\" must be \"f32\", \"bf16\" or \"f16\"", t.where);
    t.type = e["type"] == "f32" ? DType::F32 : e["type"] == "bf16" ? DType::BF16 : DType::F16;
    constexpr int64_t kMax = int64_t{1} << 40;
    t.m = number("m", true, 1, kMax, 0);
    t.n = number("n", true, 1, kMax, 0);
    t.k = number("k", true, 1, kMax, 0);
    t.stages = number("stages", false, 1, 16, 1);
    if (e.contains("outer")) t.outer = number("outer", true, 1, kMax, 1);
    t.tileM = number("tile_m", true, 1, 1024, 0);
    t.tileN = number("tile_n", true, 1, 1024, 0);
    t.split = number("split", false, 1, 64, 1);
    if (e.contains("per_stage")) {
      if (!e["per_stage"].is_boolean()) userError("--product-shapes: {}: \"per_stage\" must be true or false", t.where);
      t.perStage = e["per_stage"].get<bool>();
    }
    if (e.contains("stream_k")) {
      if (!e["stream_k"].is_boolean()) userError("--product-shapes: {}: \"stream_k\" must be true or false", t.where);
      t.streamK = e["stream_k"].get<bool>();
    }
    out.push_back(t);
  }
  return out;
}

const TabledShape* tabledShape(const Program& p, DType type, const Contraction& c) {
  for (const TabledShape& t : p.productShapes)
    if (t.type == type && t.m == c.m && t.n == c.n && t.k == c.k && t.stages == static_cast<int64_t>(c.stages.size()) &&
        (!t.outer || *t.outer == c.outerPoints))
      return &t;
  return nullptr;
}

}  // namespace kiln::tile
