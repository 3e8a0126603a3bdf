// A schedule as one line of typed fields (kiln/tile/parser.h): one table per strategy names each field's key, how it
// prints and how it reads back, so that the printer and the parser cannot disagree and a new field is one table row.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <set>

#include "kiln/support/error.h"
#include "kiln/tile/parser.h"

namespace kiln::tile {
namespace {

using ir_text::Cursor;
using TC = TiledContraction;

template <class S>
struct Field {
  const char* key;
  std::function<std::string(const S&)> print;
  std::function<void(S&, Cursor&)> parse;
  std::function<nlohmann::json(const S&)> json;  // the value in toJson (null: left out)
};

template <class S, class T>
Field<S> number(const char* key, T S::*m) {
  return {key, [m](const S& s) { return std::to_string(s.*m); },
          [m](S& s, Cursor& c) { s.*m = static_cast<T>(c.integer()); }, [m](const S& s) { return nlohmann::json(s.*m); }};
}

template <class S>
Field<S> optionalNumber(const char* key, std::optional<int64_t> S::*m) {
  return {key, [m](const S& s) { return s.*m ? std::to_string(*(s.*m)) : std::string(); },
          [m](S& s, Cursor& c) { s.*m = c.integer(); },
          [m](const S& s) { return s.*m ? nlohmann::json(*(s.*m)) : nlohmann::json(); }};
}

template <class S>
Field<S> flag(const char* key, bool S::*m) {
  return {key, [m](const S& s) { return std::string(s.*m ? "true" : "false"); },
          [m](S& s, Cursor& c) {
            if (c.acceptWord("true")) s.*m = true;
            else if (c.acceptWord("false")) s.*m = false;
            else c.fail("expected true or false");
          },
          [m](const S& s) { return nlohmann::json(s.*m); }};
}

template <class S>
Field<S> dtype(const char* key, DType S::*m) {
  return {key, [m](const S& s) { return std::string(dtypeName(s.*m)); },
          [m](S& s, Cursor& c) { s.*m = ir_text::parseDTypeWord(c); },
          [m](const S& s) { return nlohmann::json(dtypeName(s.*m)); }};
}

template <class E>
using Names = std::vector<std::pair<E, const char*>>;

template <class E>
const char* nameOf(const Names<E>& names, E v) {
  for (auto& [e, n] : names)
    if (e == v) return n;
  return "?";
}

template <class E>
E readName(Cursor& c, const Names<E>& names, const char* what) {
  std::vector<std::string> words;
  for (auto& [e, n] : names) words.push_back(n);
  size_t col = c.here();
  int i = c.oneOf(words, "", nullptr);
  if (i < 0) c.fail(fmt::format("expected {} ({})", what, fmt::join(words, ", ")), col);
  return names[static_cast<size_t>(i)].first;
}

template <class S, class E>
Field<S> choice(const char* key, E S::*m, const Names<E>& names) {
  return {key, [m, &names](const S& s) { return std::string(nameOf(names, s.*m)); },
          [m, &names, key](S& s, Cursor& c) { s.*m = readName(c, names, key); },
          [m, &names](const S& s) { return nlohmann::json(nameOf(names, s.*m)); }};
}

const Names<RowReduction::Combine> kCombines = {{RowReduction::Combine::SharedTree, "shared_tree"},
                                                {RowReduction::Combine::WarpShuffle, "warp_shuffle"}};
const Names<TC::Instruction> kInstructions = {
    {TC::Instruction::Ffma, "ffma"}, {TC::Instruction::MmaSync, "mma.sync.m16n8k16"}, {TC::Instruction::Wgmma, "wgmma.m64nNk16"}};
const Names<TC::SharedLayout> kLayouts = {{TC::SharedLayout::KMajorF32, "k_major_f32"}, {TC::SharedLayout::RowPairs, "row_pairs"},
                                          {TC::SharedLayout::CoreMatrices, "core_matrices"},
                                          {TC::SharedLayout::Swizzled128, "swizzled_128b"}, {TC::SharedLayout::RowsF32, "rows_f32"}};
const Names<TC::Copy> kCopies = {{TC::Copy::Plain, "plain"}, {TC::Copy::RegisterPrefetch, "register_prefetch"},
                                 {TC::Copy::CpAsync, "cp_async"}, {TC::Copy::Tma, "tma"}};
const Names<TC::Fragments> kFragments = {
    {TC::Fragments::Elements, "elements"}, {TC::Fragments::Pairs, "pairs"}, {TC::Fragments::Ldmatrix, "ldmatrix"}};

// An operand as COPY/LAYOUT.
Field<TC> operand(const char* key, TC::Operand TC::*m) {
  return {key, [m](const TC& s) { return fmt::format("{}/{}", nameOf(kCopies, (s.*m).copy), nameOf(kLayouts, (s.*m).layout)); },
          [m](TC& s, Cursor& c) {
            (s.*m).copy = readName(c, kCopies, "a copy");
            c.expect("/");
            (s.*m).layout = readName(c, kLayouts, "a shared layout");
          },
          [m](const TC& s) {
            return nlohmann::json{{"copy", nameOf(kCopies, (s.*m).copy)}, {"layout", nameOf(kLayouts, (s.*m).layout)}};
          }};
}

// The model's note, quoted; always the last field (it may hold blanks and `=`).
Field<TC> modelNote() {
  return {"model", [](const TC& s) { return s.model.empty() ? std::string() : "\"" + s.model + "\""; },
          [](TC& s, Cursor& c) {
            c.expect("\"");
            std::string rest = c.takeRest();
            if (rest.empty() || rest.back() != '"') c.fail("the model's note is not closed by '\"' at the end of the line");
            s.model = rest.substr(0, rest.size() - 1);
          },
          [](const TC& s) { return s.model.empty() ? nlohmann::json() : nlohmann::json(s.model); }};
}

const std::vector<Field<PointwiseMap>>& fields(const PointwiseMap*) {
  static const std::vector<Field<PointwiseMap>> f = {number("threads", &PointwiseMap::threads), number("vector", &PointwiseMap::vector),
                                                     number("vectors_per_thread", &PointwiseMap::vectorsPerThread)};
  return f;
}

const std::vector<Field<RowReduction>>& fields(const RowReduction*) {
  using R = RowReduction;
  static const std::vector<Field<R>> f = {number("threads_per_row", &R::threadsPerRow), number("rows_per_block", &R::rowsPerBlock),
                                          number("vector", &R::vector), choice("combine", &R::combine, kCombines),
                                          flag("row_in_registers", &R::rowInRegisters),
                                          number("reduction_vector", &R::reductionVector),
                                          flag("stages_together", &R::stagesTogether)};
  return f;
}

const std::vector<Field<TC>>& fields(const TC*) {
  static const std::vector<Field<TC>> f = {
      number("m_axis", &TC::mAxis), number("n_axis", &TC::nAxis), number("tile_m", &TC::tileM), number("tile_n", &TC::tileN),
      number("tile_k", &TC::tileK), choice("instruction", &TC::instruction, kInstructions), dtype("mma_type", &TC::mmaType),
      number("micro_m", &TC::microM), number("micro_n", &TC::microN), operand("a", &TC::a), operand("b", &TC::b),
      choice("fragments", &TC::fragments, kFragments), number("pipeline_depth", &TC::pipelineDepth),
      number("mma_in_flight", &TC::mmaInFlight), flag("stacked_b", &TC::stackedB), number("cluster", &TC::cluster),
      flag("multicast_b", &TC::multicastB), flag("producer_warp", &TC::producerWarp), flag("unroll_ring", &TC::unrollRing),
      number("counters", &TC::counters), number("stream_blocks", &TC::streamBlocks), number("partials", &TC::partials),
      flag("stream_k", &TC::streamK), modelNote()};
  return f;
}

const std::vector<Field<FlashAttention>>& fields(const FlashAttention*) {
  using F = FlashAttention;
  static const std::vector<Field<F>> f = {
      number("query_axis", &F::queryAxis), number("block_q", &F::blockQ), number("block_rows", &F::blockRows), number("warp_rows", &F::warpRows),
      number("block_kv", &F::blockKV), number("key_split", &F::keySplit), flag("pair_blocks", &F::pairBlocks),
      flag("rows_inner", &F::rowsInner), number("packed_pairs", &F::packedPairs), flag("row_sums_by_mma", &F::rowSumsByMma),
      flag("scores_by_wgmma", &F::scoresByWgmma), flag("values_by_wgmma", &F::valuesByWgmma),
      flag("scores_ahead", &F::scoresAhead), number("ring", &F::ring), dtype("mma_type", &F::mmaType),
      optionalNumber("key_from", &F::keyFrom), optionalNumber("key_to", &F::keyTo), number("key_blocks", &F::keyBlocks),
      number("partials", &F::partials), number("counters", &F::counters)};
  return f;
}

template <class S>
std::string printFields(const S& s) {
  static const S defaults{};
  std::string out;
  for (const Field<S>& f : fields(&s)) {
    std::string v = f.print(s);
    if (v != f.print(defaults)) out += fmt::format(" {}={}", f.key, v);
  }
  return out;
}

template <class S>
S parseFields(Cursor& c, const char* strategy) {
  S s{};
  std::set<std::string> seen;
  while (!c.atEnd()) {
    size_t col = c.here();
    std::string key = c.word();
    const auto& table = fields(&s);
    auto it = std::find_if(table.begin(), table.end(), [&](const Field<S>& f) { return key == f.key; });
    if (it == table.end()) {
      std::vector<std::string> keys;
      for (auto& f : table) keys.push_back(f.key);
      c.fail(fmt::format("{} has no field '{}' (fields: {})", strategy, key, fmt::join(keys, ", ")), col);
    }
    if (!seen.insert(key).second) c.fail(fmt::format("field '{}' is given twice", key), col);
    c.expect("=");
    it->parse(s, c);
    if (!c.rest().empty() && c.rest()[0] != ' ') c.fail(fmt::format("unexpected '{}' after field '{}'", c.rest().substr(0, 24), key));
  }
  return s;
}

template <class S>
nlohmann::json jsonFields(const S& s, const char* strategy) {
  nlohmann::json j{{"strategy", strategy}};
  for (const Field<S>& f : fields(&s))
    if (nlohmann::json v = f.json(s); !v.is_null()) j[f.key] = std::move(v);
  return j;
}

}  // namespace

nlohmann::json toJson(const Schedule& s) {
  return std::visit([&](const auto& x) { return jsonFields(x, strategyName(s)); }, s);
}

std::string scheduleFields(const Schedule& s) {
  return std::visit([&](const auto& x) { return std::string(strategyName(s)) + printFields(x); }, s);
}

Schedule parseSchedule(Cursor& c) {
  size_t col = c.here();
  std::string strategy = c.word();
  if (strategy == "pointwise_map") return parseFields<PointwiseMap>(c, "pointwise_map");
  if (strategy == "row_reduction") return parseFields<RowReduction>(c, "row_reduction");
  if (strategy == "tiled_contraction") return parseFields<TC>(c, "tiled_contraction");
  if (strategy == "flash_attention") return parseFields<FlashAttention>(c, "flash_attention");
  c.fail(fmt::format("unknown schedule strategy '{}' (pointwise_map, row_reduction, tiled_contraction, flash_attention)", strategy), col);
}

}  // namespace kiln::tile
