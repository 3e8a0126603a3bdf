// The manifest is the contract between kiln's emitter and the runtime (DESIGN.md §1 "runtime"): everything the
// runtime needs to run a compiled model without LibTorch or the compiler — the static memory plan (one arena,
// byte offsets fixed at compile time), where each weight's bytes live in weights.bin, and the kernels to launch
// in order. It is plain JSON (DIR/manifest.json) so that a user can read and edit it by hand.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kiln/support/dtype.h"
#include "kiln/support/hash.h"

namespace kiln::runtime {

// Offsets are aligned so that every buffer satisfies the widest vector load a kernel may use (and cudaMalloc's
// own guarantee), whatever the buffer's neighbours are.
inline constexpr int64_t kArenaAlignment = 256;
// v rounded up to a multiple of kArenaAlignment (where the arena's next slice may begin).
inline constexpr int64_t arenaAligned(int64_t v) { return (v + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// Counters: i64 counters kernels meet at, zero from the arena's allocation on; each kernel using them leaves them zero.
enum class BufferKind { Input, Output, Weight, Temp, Counters };

std::string_view bufferKindName(BufferKind k);  // "input", "output", "weight", "temp", "counters"

struct BufferInfo {
  int64_t id = 0;
  std::string name;  // the Torch-level value name, for messages and dumps
  BufferKind kind = BufferKind::Temp;
  DType dtype = DType::F32;
  Shape shape;
  int64_t bytes = 0;          // numel(shape) * dtypeBytes(dtype)
  int64_t offset = 0;         // into the arena
  int64_t weightOffset = -1;  // into weights.bin; only for kind == Weight ("weight_offset")
  // Output only ("in_place_of", format 5): the id of the Input whose bytes this output is written over (a model state
  // updated in place: same offset and bytes). Bound to the Model's own bytes (Model::binding) as both, the state stays
  // in the arena between forwards; bound elsewhere, forward() copies it in and out as any input and output.
  int64_t inPlaceOf = -1;
};

// A TMA tensor map the runtime encodes for a kernel (format 3, kernels[].tensor_maps; kiln/kernel/ir.h TensorMap): a
// two-dimensional view of the buffer of params[param], its element (row, col) at element offset + row * row_stride + col,
// rows x cols, copied in boxes of box_rows x box_cols, with the 128-byte swizzle or none. Passed by value after the
// kernel's device pointers, in order.
struct TensorMapInfo {
  int64_t param = 0;
  int64_t offset = 0, rows = 0, cols = 0, rowStride = 0, boxRows = 0, boxCols = 0;  // in elements of the buffer's dtype
  bool swizzle128 = false;
};

struct KernelInfo {
  std::string name;    // kernel name used in messages ("k3_softmax")
  std::string source;  // .cu file, relative to the manifest's directory (kept so users can find the code)
  std::string cubin;   // .cubin file, relative to the manifest's directory
  std::string entry;   // the extern "C" __global__ symbol in the cubin
  std::vector<int64_t> params;  // buffer ids; one device pointer per param, in this order
  int grid[3] = {1, 1, 1};
  int block[3] = {1, 1, 1};
  int64_t sharedBytes = 0;  // dynamic shared memory per block
  std::vector<TensorMapInfo> tensorMaps;  // format 3; absent from the JSON when empty
  // Format 4 (kernels[].programmatic_launch, absent when false): the kernel waits for the grids before it at its entry
  // (kiln/kernel/ir.h Kernel::programmaticLaunch), so the runtime launches it with programmatic stream serialization.
  bool programmaticLaunch = false;
};

// The manifest format this kiln writes and reads ("format_version"). A manifest without the field was written by kiln
// before it had one, in format 1. A newer format is refused with one line (use the kiln that wrote it).
// Format 2 adds "files": the size and hash (FNV-1a over 8-byte words: fast enough for gigabytes of weights) of the weights file and of every cubin, checked by verifyFiles.
// Format 3 adds kernels[].tensor_maps (a format-2 runtime would launch such kernels without them).
// Format 4 adds kernels[].programmatic_launch.
// Format 5 adds buffers[].in_place_of (a format-4 runtime would refuse the shared bytes as an overlap).
// Format 6 hashes the files from FNV's offset basis (kiln/support/hash.h); formats 2 to 5 from a basis a digit short
// of it, which verifyFiles still uses for them.
// Format 7 adds "states" and "decode" (a model's state and a decoder step's interface: kiln generate DIR).
// Format 8 adds "manifest_hash": the manifest vouches for itself (manifestHash), as "files" vouch for the rest.
// Format 1 (no "files") is refused: nothing in it vouches for the cubins it names.
inline constexpr int64_t kManifestFormatVersion = 8;

// A file of the compiled model as kiln wrote it (format 2): its name in the manifest's directory, size and hash (FNV-1a over 8-byte words: fast enough for gigabytes of weights).
struct FileInfo {
  std::string name;
  int64_t bytes = 0;
  uint64_t fnv1a = 0;  // fnv1aWords of the file (kiln/support/hash.h): FNV-1a's step over its 8-byte words, not FNV-1a
};

// A model state (format 7, "states"; kiln/torch/ir.h State): a buffer the forward reads as the input `input` and returns
// anew as the output `output` (a KV cache, a position counter), which the caller keeps from one forward to the next;
// its value before the first forward is the bytes at `initial_offset` in the weights file (the module buffer's value
// in the trace). Input and output have the same dtype and shape.
struct StateInfo {
  std::string name;
  int64_t input = -1, output = -1;  // buffer ids
  int64_t initialOffset = -1;       // into the weights file ("initial_offset")
};

// What `kiln generate DIR` needs of a decoder step beyond its buffers (format 7, "decode"; absent for other models):
// which inputs are the token ids ([1, T], i64) and their positions ([T], i64), and the bounds its input is checked
// against before anything runs. The first output is the logits [1, T, vocabulary].
struct DecodeInfo {
  int64_t tokenInput = -1, positionInput = -1;  // buffer ids ("token_input", "position_input")
  int64_t cachePositions = 0;  // positions the KV cache holds; 0 when not known ("cache_positions")
  int64_t vocabulary = 0;      // rows of the embedding the token ids index; 0 when not known
};

struct Manifest {
  int64_t formatVersion = kManifestFormatVersion;
  std::string kilnVersion;
  std::string model;
  std::string arch;  // nvcc's -arch value: "sm_90a" (kiln/support/target.h)
  int64_t arenaBytes = 0;
  std::string weightsFile = "weights.bin";
  std::vector<BufferInfo> buffers;  // buffers[i].id == i is not required; look up with findBuffer
  std::vector<int64_t> inputs;      // buffer ids, in the model's argument order
  std::vector<int64_t> outputs;     // buffer ids, in the model's result order
  std::vector<KernelInfo> kernels;  // launch order
  std::vector<FileInfo> files;      // format 2: weights_file and every distinct cubin; empty in format 1
  std::vector<StateInfo> states;    // format 7: the model's states, in the order its forward takes them
  std::optional<DecodeInfo> decode; // format 7: present when the entry is a decoder step
  uint64_t manifestHash = 0;        // format 8: "manifest_hash" as read (toJson computes it afresh)

  // nullptr if no buffer has this id.
  const BufferInfo* findBuffer(int64_t id) const;
};

inline constexpr const char* kManifestFileName = "manifest.json";

// A directory may hold several entry points of one model (kiln compile --emit cuda --prefill-chunk C: the decode step
// and a prefill chunk), each a complete manifest of its own sharing the directory's weights file: the first is
// manifest.json (entry ""), entry NAME is manifest.NAME.json. UsageError for a name that is not 1 to 32 of a-z, 0-9
// and '_' (it names a file).
std::string manifestFileName(const std::string& entry);

// Reads and validates DIR/manifest.json (or entry `entry`'s manifest). Throws UserError (one line naming the file and
// the field) on a missing file, malformed JSON, a missing or mistyped field, a plan that fails validate(), or (format 8)
// contents that do not hash to its manifest_hash.
Manifest readManifest(const std::filesystem::path& dir, const std::string& entry = "");

// Checks every file of m.files in `dir` against its size and hash (format 1 manifests list none). Throws UserError
// naming the first file that is missing, of another size or another content: "changed after kiln wrote it".
void verifyFiles(const Manifest& m, const std::filesystem::path& dir);
// The FileInfo of `dir`/`name` as it is now. Throws UserError if it cannot be read.
FileInfo describeFile(const std::filesystem::path& dir, const std::string& name, uint64_t basis = kFnvOffsetBasis);

// Parses an already-loaded JSON document; `what` names its origin in messages. Also validates.
Manifest manifestFromJson(const nlohmann::json& j, const std::string& what);

nlohmann::json toJson(const Manifest& m);
// FNV-1a (from FNV's offset basis, over bytes) of the manifest's JSON without its "manifest_hash", printed compact with
// its keys sorted (nlohmann's objects keep them so): what format 8 records and readManifest checks, so that a manifest
// edited by hand (swapped weight offsets, another grid or output shape) is refused as changed after kiln wrote it.
uint64_t manifestHash(const nlohmann::json& j);

// Writes DIR/manifest.json (pretty-printed, so diffs between compilations are readable). Validates first so that
// the emitter cannot write a manifest the runtime would refuse.
void writeManifest(const Manifest& m, const std::filesystem::path& dir, const std::string& entry = "");

// Checks the memory plan and kernel list are self-consistent: unique ids, buffers inside the arena and aligned,
// bytes == numel * dtypeBytes, weights have a weight_offset, inputs/outputs/params refer to existing buffers of
// the right kind, launch dimensions positive, tensor maps inside their buffers with TMA's alignments and box limits. Throws UserError prefixed by `what` (usually the file path).
void validate(const Manifest& m, const std::string& what);

// Whether cubins compiled for `arch` run on a device of compute capability major.minor: "" if they do, else one
// line saying why not and which --arch to recompile with. sm_XY runs on compute capability X.y for y >= Y;
// sm_XYa (architecture-specific features such as wgmma) only on exactly X.Y. An arch that is not of the form
// sm_<digits>[a] is not checked (""): the driver then reports what it finds.
std::string archMismatch(const std::string& arch, int major, int minor);

}  // namespace kiln::runtime
