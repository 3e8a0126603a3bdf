// The CUDA level: Kernel IR printed as CUDA C++ (one translation unit per kernel), and the artifacts
// `kiln compile --emit cuda -o DIR` writes: the .cu files, the templates they include, manifest.json
// (kernels in launch order, buffers in one arena, inputs, outputs), weights.bin and one cubin per kernel.
#pragma once
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kernel/ir.h"
#include "kiln/support/host_tensor.h"

namespace kiln::cuda {

struct Source {
  std::string kernel;  // entry point name
  std::string file;    // "k3_reduce_sum.cu"
  std::string text;
};

struct Module {
  std::string modelName;
  std::vector<Source> sources;
};

Module emit(const kernel::Program& p);  // cuda-emit
std::string print(const Module& m);     // every file, each under a "// ----- file -----" header
nlohmann::json toJson(const Module& m);
void verify(const Module& m);

struct ArtifactOptions {
  std::string arch = kDefaultArch;  // a Target (kiln/support/target.h)
  bool compile = true;  // run nvcc to produce cubins
};

// Writes everything into `dir` through an OutputDir (kiln/support/output.h): built in a staging directory
// inside it and moved into place file by file, manifest.json last, so a failure leaves the previous output
// (or nothing) behind. `dir` must be new, empty or marked as kiln's (.kiln-output); in a marked directory
// only kiln's files of the previous output are replaced or removed. Throws UserError on nvcc errors or
// warnings (with the log).
void writeArtifacts(const kernel::Program& p, const Module& m, const std::filesystem::path& dir,
                    const ArtifactOptions& opts);

// One entry point of an emitted directory: a compiled forward of the model at some shapes (a decode step, a prefill
// chunk). Entries after the first have a name and kernels whose names start with it ("prefill_k3_add": their files
// must not collide with the first entry's).
// A state of the model an entry was compiled from (kiln/torch/ir.h State), in the order its forward takes them (the
// program's last inputs and outputs): its name and its value before the first forward, stored in the weights file
// (runtime::StateInfo).
struct ArtifactState {
  std::string name;
  HostTensor initial;
};
// A decoder step's interface (runtime::DecodeInfo), its inputs named by their place among the program's inputs.
struct ArtifactDecode {
  size_t tokenArgument = 0, positionArgument = 1;
  int64_t cachePositions = 0, vocabulary = 0;
};
struct ArtifactEntry {
  std::string name;  // "" for the first: manifest.json; otherwise manifest.NAME.json (runtime::manifestFileName)
  const kernel::Program* program = nullptr;
  const Module* module = nullptr;
  std::vector<ArtifactState> states;    // recorded in the manifest with their initial values (format 7)
  std::optional<ArtifactDecode> decode; // recorded where the entry is a decoder step
};
// Writes several entries into one directory as writeArtifacts does one: each its manifest, .cu files and cubins, all
// reading one weights file, where a weight of a later entry whose bytes equal a weight's of an earlier entry is stored
// once (the entries of one model share every weight but the constants that depend on the shapes).
void writeArtifacts(const std::vector<ArtifactEntry>& entries, const std::filesystem::path& dir, const ArtifactOptions& opts);

// The nvcc writeArtifacts runs: its path, and the size and modification time of the file it resolves to (for
// cache keys: a replaced toolkit may compile the same source differently). Empty fields if it is not found.
std::string nvccIdentity();

// Compiles .cu files in `dir` with nvcc into cubins next to them; warnings are errors. Returns the log.
std::string compileWithNvcc(const std::filesystem::path& dir, const std::vector<std::string>& files,
                            const std::string& arch);

}  // namespace kiln::cuda
