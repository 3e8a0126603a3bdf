#include "kiln/runtime/manifest.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "kiln/support/checked_int.h"
#include "kiln/support/error.h"
#include "kiln/support/files.h"
#include "kiln/support/hash.h"
#include "kiln/support/target.h"
#include "manifest_internal.h"

namespace kiln::runtime {

using nlohmann::json;
using detail::Reader;

std::string_view bufferKindName(BufferKind k) {
  switch (k) {
    case BufferKind::Input: return "input";
    case BufferKind::Output: return "output";
    case BufferKind::Weight: return "weight";
    case BufferKind::Temp: return "temp";
    case BufferKind::Counters: return "counters";
  }
  return "?";
}

const BufferInfo* Manifest::findBuffer(int64_t id) const {
  for (const BufferInfo& b : buffers)
    if (b.id == id) return &b;
  return nullptr;
}

namespace {

BufferKind parseKind(const std::string& s, const std::string& what, const std::string& path) {
  for (BufferKind k : {BufferKind::Input, BufferKind::Output, BufferKind::Weight, BufferKind::Temp, BufferKind::Counters})
    if (bufferKindName(k) == s) return k;
  userError("{}: field '{}' must be one of input|output|weight|temp|counters, got \"{}\"", what, path, s);
}

}  // namespace

static void validatePlan(const Manifest& m, const std::string& what);
namespace {
std::pair<int, bool> parseArch(const std::string& arch);  // below
}  // namespace

static Manifest parseManifest(const json& j, const std::string& what) {
  Reader r{what};
  if (!j.is_object()) userError("{}: top level must be a JSON object", what);
  Manifest m;
  m.formatVersion = 1;  // a manifest without the field predates it: format 1
  if (!j.contains("format_version"))
    userError("{}: a manifest of format 1 (no format_version: kiln before 2026-12-02) lists no hashes of its files, so "
              "nothing vouches for the cubins it would load; compile the model again with this kiln", what);
  {
    m.formatVersion = r.integer(j, "", "format_version");
    if (m.formatVersion < 1 || m.formatVersion > kManifestFormatVersion)
      userError("{}: manifest format {} (kiln {}) is not one this runtime reads (formats 1 to {}): run it with the "
                "kiln that wrote it, or compile the model again with this one", what, m.formatVersion,
                j.contains("kiln_version") && j["kiln_version"].is_string() ? j["kiln_version"].get<std::string>() : "unknown",
                kManifestFormatVersion);
  }
  m.kilnVersion = r.str(j, "", "kiln_version");
  m.model = r.str(j, "", "model");
  m.arch = r.str(j, "", "arch");
  m.arenaBytes = r.integer(j, "", "arena_bytes");
  m.weightsFile = r.str(j, "", "weights_file");
  const json& bufs = r.array(j, "", "buffers");
  for (size_t i = 0; i < bufs.size(); ++i) {
    std::string p = fmt::format("buffers[{}]", i);
    const json& bj = bufs[i];
    BufferInfo b;
    b.id = r.integer(bj, p, "id");
    b.name = r.str(bj, p, "name");
    b.kind = parseKind(r.str(bj, p, "kind"), what, p + ".kind");
    std::string dt = r.str(bj, p, "dtype");
    auto d = parseDType(dt);
    if (!d) userError("{}: field '{}.dtype' is not a known dtype: \"{}\"", what, p, dt);
    b.dtype = *d;
    b.shape = r.ints(bj, p, "shape");
    b.bytes = r.integer(bj, p, "bytes");
    b.offset = r.integer(bj, p, "offset");
    if (b.kind == BufferKind::Weight) b.weightOffset = r.integer(bj, p, "weight_offset");
    if (bj.contains("in_place_of")) {
      if (m.formatVersion < 5) userError("{}: {}.in_place_of in a manifest of format {} (it came with format 5)", what, p, m.formatVersion);
      b.inPlaceOf = r.integer(bj, p, "in_place_of");
    }
    m.buffers.push_back(std::move(b));
  }
  m.inputs = r.ints(j, "", "inputs");
  m.outputs = r.ints(j, "", "outputs");
  const json& ks = r.array(j, "", "kernels");
  for (size_t i = 0; i < ks.size(); ++i) {
    std::string p = fmt::format("kernels[{}]", i);
    const json& kj = ks[i];
    KernelInfo k;
    k.name = r.str(kj, p, "name");
    k.source = r.str(kj, p, "source");
    k.cubin = r.str(kj, p, "cubin");
    k.entry = r.str(kj, p, "entry");
    k.params = r.ints(kj, p, "params");
    r.dim3(kj, p, "grid", k.grid);
    r.dim3(kj, p, "block", k.block);
    k.sharedBytes = r.integer(kj, p, "shared_bytes");
    if (kj.contains("tensor_maps")) {
      if (m.formatVersion < 3) userError("{}: {}.tensor_maps in a manifest of format {} (they came with format 3)", what, p, m.formatVersion);
      const json& maps = r.array(kj, p, "tensor_maps");
      for (size_t t = 0; t < maps.size(); ++t) {
        std::string q = fmt::format("{}.tensor_maps[{}]", p, t);
        TensorMapInfo tm;
        tm.param = r.integer(maps[t], q, "param");
        tm.offset = r.integer(maps[t], q, "offset");
        tm.rows = r.integer(maps[t], q, "rows");
        tm.cols = r.integer(maps[t], q, "cols");
        tm.rowStride = r.integer(maps[t], q, "row_stride");
        tm.boxRows = r.integer(maps[t], q, "box_rows");
        tm.boxCols = r.integer(maps[t], q, "box_cols");
        const std::string swizzle = r.str(maps[t], q, "swizzle");
        if (swizzle != "128b" && swizzle != "none") userError("{}: field '{}.swizzle' must be \"128b\" or \"none\"", what, q);
        tm.swizzle128 = swizzle == "128b";
        k.tensorMaps.push_back(tm);
      }
    }
    if (kj.contains("programmatic_launch")) {
      if (m.formatVersion < 4)
        userError("{}: {}.programmatic_launch in a manifest of format {} (it came with format 4)", what, p, m.formatVersion);
      k.programmaticLaunch = r.boolean(kj, p, "programmatic_launch");
    }
    m.kernels.push_back(std::move(k));
  }
  if (m.formatVersion >= 2) {
    const json& fs = r.array(j, "", "files");
    for (size_t i = 0; i < fs.size(); ++i) {
      std::string p = fmt::format("files[{}]", i);
      FileInfo f;
      f.name = r.str(fs[i], p, "name");
      f.bytes = r.integer(fs[i], p, "bytes");
      std::string hex = r.str(fs[i], p, "fnv1a_words");
      char* end = nullptr;
      f.fnv1a = std::strtoull(hex.c_str(), &end, 16);
      if (hex.size() != 16 || *end != '\0') userError("{}: field '{}.fnv1a_words' must be 16 hex digits, got \"{}\"", what, p, hex);
      m.files.push_back(std::move(f));
    }
  }
  detail::parseStates(j, m, r);
  if (j.contains("manifest_hash") && m.formatVersion < 8)
    userError("{}: 'manifest_hash' in a manifest of format {} (it came with format 8)", what, m.formatVersion);
  if (m.formatVersion >= 8) {
    const std::string hex = r.str(j, "", "manifest_hash");
    char* end = nullptr;
    m.manifestHash = std::strtoull(hex.c_str(), &end, 16);
    if (hex.size() != 16 || *end != '\0') userError("{}: field 'manifest_hash' must be 16 hex digits, got \"{}\"", what, hex);
  }
  validatePlan(m, what);
  return m;
}

// A file the manifest names must lie in its directory: a relative path without '..' (nothing outside is ever read).
static void checkFileName(const std::string& name, const std::string& what, const std::string& field) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    userError("{}: {} \"{}\" must name a file in the manifest's directory (a name without '/')", what, field, name);
}

// A tensor map TMA can encode, inside its buffer: the limits of cuTensorMapEncodeTiled (16-byte aligned start and row
// stride, boxes of 1..256 a side with 16-byte multiple rows, 128-byte rows under the 128-byte swizzle).
static void validateTensorMap(const Manifest& m, const KernelInfo& k, const TensorMapInfo& t, const std::string& where) {
  if (t.param < 0 || t.param >= static_cast<int64_t>(k.params.size()))
    userError("{}: param {} is not one of the kernel's {} params", where, t.param, k.params.size());
  const BufferInfo* b = m.findBuffer(k.params[static_cast<size_t>(t.param)]);
  const int64_t e = dtypeBytes(b->dtype), limit = int64_t{1} << 40;
  auto within = [&](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  if (!within(t.rows, 1, limit) || !within(t.cols, 1, limit) || !within(t.rowStride, t.cols, limit) || !within(t.offset, 0, limit) ||
      !within(t.boxRows, 1, 256) || !within(t.boxCols, 1, 256))
    userError("{}: rows {}, cols {}, row_stride {}, offset {}, box {} x {} out of range", where, t.rows, t.cols, t.rowStride, t.offset,
              t.boxRows, t.boxCols);
  // Each step checked: rows 2^27 + 1 with a row stride of 2^37 wrapped around and passed (issue 45).
  const std::optional<int64_t> span = checkedMul(t.rows - 1, t.rowStride);
  const std::optional<int64_t> end = span ? checkedAdd(t.offset + t.cols, *span) : std::nullopt;
  const std::optional<int64_t> endBytes = end ? checkedMul(*end, e) : std::nullopt;
  if (!endBytes || *endBytes > b->bytes)
    userError("{}: the view reaches past the {} bytes of buffer '{}'", where, b->bytes, b->name);
  if (t.offset * e % 16 != 0 || t.rowStride * e % 16 != 0 || t.boxCols * e % 16 != 0 || (t.swizzle128 && t.boxCols * e != 128))
    userError("{}: offset, row stride and box rows must be multiples of 16 bytes (box rows of 128 bytes with the 128b swizzle)", where);
}

// One buffer's id is new, its bytes are its shape's, and it lies inside the arena at an aligned offset.
static void validateBuffer(const Manifest& m, size_t i, std::set<int64_t>& ids, const std::string& what) {
  const BufferInfo& b = m.buffers[i];
  std::string p = fmt::format("buffers[{}] ('{}')", i, b.name);
  if (!ids.insert(b.id).second) userError("{}: {}: duplicate buffer id {}", what, p, b.id);
  int64_t want = dtypeBytes(b.dtype);
  for (int64_t d : b.shape) {
    if (d < 0) userError("{}: {}: negative dimension in shape [{}]", what, p, fmt::join(b.shape, ", "));
    if (__builtin_mul_overflow(want, d, &want))
      userError("{}: {}: shape [{}] of {} has more bytes than a 64-bit size holds", what, p, fmt::join(b.shape, ", "),
                dtypeName(b.dtype));
  }
  if (b.bytes != want)
    userError("{}: {}: bytes is {} but shape [{}] of {} needs {}", what, p, b.bytes, fmt::join(b.shape, ", "),
              dtypeName(b.dtype), want);
  if (b.offset < 0 || b.offset % kArenaAlignment != 0)
    userError("{}: {}: offset {} is not a non-negative multiple of {}", what, p, b.offset, kArenaAlignment);
  if (b.offset > m.arenaBytes || b.bytes > m.arenaBytes - b.offset)
    userError("{}: {}: [offset {}, +{} bytes) lies outside the arena of {} bytes", what, p, b.offset, b.bytes,
              m.arenaBytes);
  if (b.kind == BufferKind::Weight && (b.weightOffset < 0 || !checkedAdd(b.weightOffset, b.bytes)))
    userError("{}: {}: weight buffer needs a non-negative weight_offset whose end fits a 64-bit size, got {}", what, p,
              b.weightOffset);
}

// Every id of `v` names a buffer of `kind`.
static void checkIds(const Manifest& m, const std::vector<int64_t>& v, const char* field, BufferKind kind,
                     const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i) {
    const BufferInfo* b = m.findBuffer(v[i]);
    if (!b) userError("{}: {}[{}] refers to buffer id {}, which does not exist", what, field, i, v[i]);
    if (b->kind != kind)
      userError("{}: {}[{}] refers to buffer {} ('{}') of kind {}, expected {}", what, field, i, v[i], b->name,
                bufferKindName(b->kind), bufferKindName(kind));
  }
}

// Every buffer of `kind` appears in `v` exactly once.
static void checkListedOnce(const Manifest& m, const std::vector<int64_t>& v, const char* field, BufferKind kind,
                            const std::string& what) {
  for (const BufferInfo& b : m.buffers)
    if (b.kind == kind && std::count(v.begin(), v.end(), b.id) != 1)
      userError("{}: buffer {} ('{}') of kind {} must appear once in {}, not {} times", what, b.id, b.name, bufferKindName(kind),
                field, std::count(v.begin(), v.end(), b.id));
}

// An output written in place of an input (in_place_of) names an input of the same offset and bytes.
static void checkInPlace(const Manifest& m, const std::string& what) {
  for (const BufferInfo& b : m.buffers) {
    if (b.inPlaceOf < 0) continue;
    const BufferInfo* in = m.findBuffer(b.inPlaceOf);
    if (b.kind != BufferKind::Output || !in || in->kind != BufferKind::Input || in->offset != b.offset || in->bytes != b.bytes)
      userError("{}: buffer {} ('{}') is in_place_of {}, which is not an input at its offset {} of its {} bytes", what, b.id,
                b.name, b.inPlaceOf, b.offset, b.bytes);
  }
}

// Whether two buffers may share arena bytes: temporaries (a lifetime-based plan), and an output with the input it is
// written in place of.
static bool mayShare(const BufferInfo& a, const BufferInfo& b) {
  return (a.kind == BufferKind::Temp && b.kind == BufferKind::Temp) || a.inPlaceOf == b.id || b.inPlaceOf == a.id;
}

// No buffer shares arena bytes with another, but those that may (mayShare).
static void checkNoOverlap(const Manifest& m, const std::string& what) {
  std::vector<const BufferInfo*> byOffset;
  for (const BufferInfo& b : m.buffers)
    if (b.bytes > 0) byOffset.push_back(&b);
  std::sort(byOffset.begin(), byOffset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 0; i < byOffset.size(); ++i)
    for (size_t j = i + 1; j < byOffset.size() && byOffset[j]->offset < byOffset[i]->offset + byOffset[i]->bytes; ++j)
      if (!mayShare(*byOffset[i], *byOffset[j]))
        userError("{}: buffers {} ('{}') and {} ('{}') overlap in the arena ([{}, +{}) and [{}, +{}))", what, byOffset[i]->id,
                  byOffset[i]->name, byOffset[j]->id, byOffset[j]->name, byOffset[i]->offset, byOffset[i]->bytes,
                  byOffset[j]->offset, byOffset[j]->bytes);
}

// A kernel names an entry and a cubin in the directory, launches a positive grid and block, and binds buffers and
// tensor maps that exist.
static void validateKernel(const Manifest& m, size_t i, const std::string& what) {
  const KernelInfo& k = m.kernels[i];
  std::string p = fmt::format("kernels[{}] ('{}')", i, k.name);
  if (k.entry.empty()) userError("{}: {}: empty entry name", what, p);
  if (k.params.empty()) userError("{}: {}: no params (a kernel kiln writes binds at least the buffer it writes)", what, p);
  checkFileName(k.cubin, what, p + ": cubin");
  for (size_t a = 0; a < k.params.size(); ++a)
    if (!m.findBuffer(k.params[a]))
      userError("{}: {}: params[{}] refers to buffer id {}, which does not exist", what, p, a, k.params[a]);
  for (int d = 0; d < 3; ++d)
    if (k.grid[d] <= 0 || k.block[d] <= 0)
      userError("{}: {}: grid and block dimensions must be positive, got grid [{}] block [{}]", what, p,
                fmt::join(k.grid, ", "), fmt::join(k.block, ", "));
  if (k.sharedBytes < 0 || k.sharedBytes > INT32_MAX)
    userError("{}: {}: shared_bytes out of range: {}", what, p, k.sharedBytes);
  for (size_t t = 0; t < k.tensorMaps.size(); ++t) validateTensorMap(m, k, k.tensorMaps[t], fmt::format("{}: {}: tensor_maps[{}]", what, p, t));
  // Launched early, a kernel without griddepcontrol.wait (compiled for an earlier architecture) would race the one before.
  if (k.programmaticLaunch && parseArch(m.arch).first < 90)
    userError("{}: {}: a programmatic launch in a manifest for {} (only kernels for sm_90 and later wait for the ones before them)",
              what, p, m.arch);
}

static void validatePlan(const Manifest& m, const std::string& what) {
  if (m.arenaBytes < 0) userError("{}: arena_bytes must be >= 0, got {}", what, m.arenaBytes);
  checkFileName(m.weightsFile, what, "weights_file");
  std::set<int64_t> ids;
  for (size_t i = 0; i < m.buffers.size(); ++i) validateBuffer(m, i, ids, what);
  checkIds(m, m.inputs, "inputs", BufferKind::Input, what);
  checkIds(m, m.outputs, "outputs", BufferKind::Output, what);
  // Every input buffer is bound by the caller and every output returned, each once; a model computes something.
  checkListedOnce(m, m.inputs, "inputs", BufferKind::Input, what);
  checkListedOnce(m, m.outputs, "outputs", BufferKind::Output, what);
  for (const BufferInfo& b : m.buffers)
    if (b.kind == BufferKind::Input && b.bytes == 0)
      userError("{}: input buffer {} ('{}') has no elements (shape [{}]): kiln compiles no model with an empty input", what,
                b.id, b.name, fmt::join(b.shape, ", "));
  if (m.outputs.empty()) userError("{}: the model has no outputs", what);
  if (m.kernels.empty()) userError("{}: the model has no kernels (nothing would write its outputs)", what);
  checkInPlace(m, what);
  checkNoOverlap(m, what);
  for (const FileInfo& f : m.files) {
    checkFileName(f.name, what, "files[].name");
    if (f.bytes < 0) userError("{}: file \"{}\" has {} bytes", what, f.name, f.bytes);
  }
  for (size_t i = 0; i < m.kernels.size(); ++i) validateKernel(m, i, what);
  detail::validateStates(m, what);
}

// Names and strings in a manifest come from its file: a control character in one (a newline in a buffer's name)
// would break the one-line message that quotes it, so messages show such bytes as \xHH.
[[noreturn]] static void rethrowOnOneLine(const UserError& e) { throw UserError(printable(e.what())); }

Manifest manifestFromJson(const json& j, const std::string& what) {
  try {
    return parseManifest(j, what);
  } catch (const UserError& e) {
    rethrowOnOneLine(e);
  }
}

void validate(const Manifest& m, const std::string& what) {
  try {
    validatePlan(m, what);
  } catch (const UserError& e) {
    rethrowOnOneLine(e);
  }
}

std::string manifestFileName(const std::string& entry) {
  if (entry.empty()) return kManifestFileName;
  const bool named = entry.size() <= 32 && std::all_of(entry.begin(), entry.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
  });
  if (!named) usageError("entry '{}': an entry point is named by 1 to 32 of a-z, 0-9 and '_'", entry);
  return fmt::format("manifest.{}.json", entry);
}

Manifest readManifest(const std::filesystem::path& dir, const std::string& entry) {
  std::filesystem::path file = dir / manifestFileName(entry);
  std::string what = file.string();
  if (std::string what = notARegularFile(file.string()); !what.empty())
    userError("{}: the manifest is {}, not a file; name a directory written by kiln compile", file.string(), what);
  std::ifstream in(file, std::ios::binary);
  if (!in) userError("{}: cannot open manifest (is '{}' a directory written by kiln compile?)", what, dir.string());
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::parse_error& e) {
    userError("{}: malformed JSON: {}", what, e.what());  // nlohmann's message is one line with the byte offset
  }
  Manifest m = manifestFromJson(j, what);
  if (m.formatVersion >= 8 && manifestHash(j) != m.manifestHash)
    userError("{}: changed after kiln wrote it (its contents hash to {:016x}; its manifest_hash says {:016x}); compile the "
              "model again", what, manifestHash(j), m.manifestHash);
  return m;
}

json toJson(const Manifest& m) {
  json j;
  j["format_version"] = m.formatVersion;
  j["kiln_version"] = m.kilnVersion;
  j["model"] = m.model;
  j["arch"] = m.arch;
  j["arena_bytes"] = m.arenaBytes;
  j["weights_file"] = m.weightsFile;
  json bufs = json::array();
  for (const BufferInfo& b : m.buffers) {
    json bj = {{"id", b.id},         {"name", b.name},   {"kind", bufferKindName(b.kind)},
               {"dtype", dtypeName(b.dtype)}, {"shape", b.shape}, {"bytes", b.bytes},
               {"offset", b.offset}};
    if (b.kind == BufferKind::Weight) bj["weight_offset"] = b.weightOffset;
    if (b.inPlaceOf >= 0) bj["in_place_of"] = b.inPlaceOf;
    bufs.push_back(std::move(bj));
  }
  j["buffers"] = std::move(bufs);
  j["inputs"] = m.inputs;
  j["outputs"] = m.outputs;
  json ks = json::array();
  for (const KernelInfo& k : m.kernels) {
    ks.push_back({{"name", k.name},
                  {"source", k.source},
                  {"cubin", k.cubin},
                  {"entry", k.entry},
                  {"params", k.params},
                  {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                  {"block", {k.block[0], k.block[1], k.block[2]}},
                  {"shared_bytes", k.sharedBytes}});
    for (const TensorMapInfo& t : k.tensorMaps)
      ks.back()["tensor_maps"].push_back({{"param", t.param}, {"offset", t.offset}, {"rows", t.rows}, {"cols", t.cols},
                                          {"row_stride", t.rowStride}, {"box_rows", t.boxRows}, {"box_cols", t.boxCols},
                                          {"swizzle", t.swizzle128 ? "128b" : "none"}});
    if (k.programmaticLaunch) ks.back()["programmatic_launch"] = true;
  }
  j["kernels"] = std::move(ks);
  if (m.formatVersion >= 2) {
    json fs = json::array();
    for (const FileInfo& f : m.files) fs.push_back({{"name", f.name}, {"bytes", f.bytes}, {"fnv1a_words", fmt::format("{:016x}", f.fnv1a)}});
    j["files"] = std::move(fs);
  }
  detail::statesToJson(m, j);
  if (m.formatVersion >= 8) j["manifest_hash"] = fmt::format("{:016x}", manifestHash(j));
  return j;
}

uint64_t manifestHash(const json& j) {
  json rest = j;
  rest.erase("manifest_hash");
  const std::string text = rest.dump();  // objects keep their keys sorted: one text for one manifest
  return fnv1a(kFnvOffsetBasis, text.data(), text.size());
}

FileInfo describeFile(const std::filesystem::path& dir, const std::string& name, uint64_t basis) {
  FileInfo f{name, 0, 0};
  if (!hashFile((dir / name).string(), f.fnv1a, f.bytes, basis)) userError("{}: cannot read it", (dir / name).string());
  return f;
}

void verifyFiles(const Manifest& m, const std::filesystem::path& dir) try {
  const uint64_t basis = m.formatVersion >= 6 ? kFnvOffsetBasis : kFormat5FileHashBasis;
  for (const FileInfo& want : m.files) {
    std::error_code ec;
    const auto status = std::filesystem::symlink_status(dir / want.name, ec);
    if (status.type() == std::filesystem::file_type::symlink)
      userError("{}: a symbolic link, which kiln never writes (it could lead outside the directory); compile the model "
                "again", (dir / want.name).string());
    if (!std::filesystem::is_regular_file(status))
      userError("{}: missing (the manifest lists it; compile the model again)", (dir / want.name).string());
    FileInfo got = describeFile(dir, want.name, basis);
    if (got.bytes != want.bytes || got.fnv1a != want.fnv1a)
      userError("{}: changed after kiln wrote it ({} bytes, hash {:016x}; the manifest says {} bytes, {:016x}); compile the "
                "model again", (dir / want.name).string(), got.bytes, got.fnv1a, want.bytes, want.fnv1a);
  }
} catch (const UserError& e) {
  rethrowOnOneLine(e);
}

void writeManifest(const Manifest& m, const std::filesystem::path& dir, const std::string& entry) {
  std::filesystem::path file = dir / manifestFileName(entry);
  validate(m, file.string());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) userError("{}: cannot open for writing", file.string());
  out << toJson(m).dump(2) << "\n";
  if (!out) userError("{}: write failed", file.string());
}

namespace {

// "sm_90a" -> {90, true} (the last digit is the minor version); {-1, false} if `arch` is not sm_<2-5 digits>[a].
std::pair<int, bool> parseArch(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) return {-1, false};
  size_t i = 3;
  int v = 0;
  for (; i < arch.size() && i < 8 && isdigit(static_cast<unsigned char>(arch[i])); ++i) v = v * 10 + (arch[i] - '0');
  if (i < 5) return {-1, false};
  bool specific = i < arch.size() && arch[i] == 'a';
  if (i + (specific ? 1 : 0) != arch.size()) return {-1, false};
  return {v, specific};
}

bool runsOn(int number, bool specific, int major, int minor) {
  return number / 10 == major && (specific ? number % 10 == minor : number % 10 <= minor);
}

}  // namespace

std::string archMismatch(const std::string& arch, int major, int minor) {
  auto [number, specific] = parseArch(arch);
  if (number < 0 || runsOn(number, specific, major, minor)) return "";
  std::string runs = specific ? fmt::format("only on compute capability {}.{} (architecture-specific features)",
                                            number / 10, number % 10)
                     : number % 10 == 0 ? fmt::format("on compute capability {}.x", number / 10)
                                        : fmt::format("on compute capability {}.{} or a later {}.x", number / 10, number % 10, number / 10);
  std::string fix;  // the most specific known target that runs here
  for (const Target& t : knownTargets()) {
    auto [n, a] = parseArch(t.arch);
    if (runsOn(n, a, major, minor)) fix = t.arch;
  }
  return fmt::format("{} cubins run {}, and the device is {}.{}; {}", arch, runs, major, minor,
                     fix.empty() ? fmt::format("kiln has no target for it (it knows {})", knownArchList())
                                 : fmt::format("recompile with --arch {}", fix));
}

}  // namespace kiln::runtime
