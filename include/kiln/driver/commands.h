// The `kiln` subcommands, callable from tests. Each returns the process exit code: 0 success, 1 user
// error or failed check, 2 usage error, 3 internal error.
#pragma once
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "kiln/frontend/frontend.h"
#include "kiln/support/pipeline.h"
#include "kiln/support/target.h"

namespace kiln {

struct CompileCommand {
  std::string model;
  std::vector<std::string> inputs;  // --input NAME=SHAPE[:DTYPE]
  std::string ir = "loop";          // --ir LEVEL
  bool json = false;
  std::string emit;                 // --emit cuda
  std::string output;               // -o FILE (--ir) or DIR (--emit)
  std::string arch = kDefaultArch;   // --arch: a Target (kiln/support/target.h)
  bool noCompile = false;           // --no-nvcc: write .cu and manifest without cubins
  bool explainFusion = false;       // --explain-fusion: print the Loop-IR fusion report
  bool explainSchedule = false;     // --explain-schedule: each kernel's schedule and why (tile::explainSchedules)
  bool explainMemory = false;       // --explain-memory: the arena plan (cuda::explainMemory)
  std::string dtype;                // --dtype f16|bf16: cast the model's weights and float inputs
  // --prefill-chunk C (with --emit cuda, a decoder-step trace): two entry points into one directory, the decode step
  // (1 token: manifest.json) and a prefill chunk of C tokens (manifest.prefill.json), sharing weights.bin.
  int prefillChunk = 0;
  std::string tokenInput, positionInput;  // --token-input / --position-input (default: the forward's first and second)
  PipelineOptions pipeline;
};

struct RunCommand {
  std::string model;                // a .pt, or a directory written by `kiln compile --emit cuda` (has manifest.json)
  std::string entry;                // --entry NAME: with a directory, its entry point NAME (manifest.NAME.json)
  std::string reference;            // --reference M.pt: with a directory, the model --check compares against
  std::string saveIo;               // --save-io DIR: write each input and output's bytes (inputN.bin, outputN.bin)
  std::string inputsDir;            // --inputs DIR: read the inputs from inputN.bin (as --save-io writes them)
  std::vector<std::string> inputs;
  bool check = false;
  bool interpret = false;
  bool bisect = false;              // --bisect: with --check, the first kernel whose output differs (bisect.h)
  uint64_t seed = 0;
  std::string arch = kDefaultArch;   // --arch: a Target (kiln/support/target.h)
  int benchIters = 0;               // --bench N: time N forward passes on the GPU
  bool benchGraph = false;          // --graph: given explicitly (graph replay is the default)
  bool benchNoGraph = false;        // --no-graph: time the kernels launched one by one instead of graph replays
  double benchRotateMb = 0;         // --rotate-mb M: rotate over arena copies touching >= M MB
  bool profile = false;             // --profile: with --bench N, also time each kernel alone (N launches)
  std::string dtype;                // --dtype f16|bf16
  // --json: stdout is one JSON object (the run, each output's sum and fingerprint, the check's verdict per output, the
  // timings and profile) with kiln's other lines under "messages"; errors stay one line on stderr.
  bool json = false;
  PipelineOptions pipeline;
};

struct InspectCommand {
  std::string model;
  bool json = false;  // --json: the same facts as one JSON object (what scripts read instead of the text)
};

// `kiln opt` (src/driver/opt.cpp): IR text in, the named passes of its level run with the verifier after each, IR text out.
struct OptCommand {
  std::string file;                 // the IR text to read
  std::string level = "kernel";     // --level: the file's IR level: loop, tile or kernel
  std::vector<std::string> passes;  // --passes a,b,c: run in this order (the level's, then the next level's after its lowering)
  std::string arch = kDefaultArch;  // --arch: the Target tile-lower-from-loop sizes schedules for (Tile and Kernel IR name theirs)
  std::string output;               // -o FILE (default: standard output)
  PipelineOptions pipeline;         // -v, --print-after-all, --time-passes, --no-verify
};

int runCompile(const CompileCommand& c, std::ostream& out);
// Reads, verifies, runs the passes, prints; a bad file is a UserError, a bad pass name a UsageError.
int runOpt(const OptCommand& c, std::ostream& out);
// Lists a model's inputs (names, recorded shapes or an example --input), parameters and buffers (count,
// bytes, dtypes) and the ops of its forward, marking those on input data kiln does not lower. Needs no
// input shapes, so it works on a plain torch.jit.trace.
int runInspect(const InspectCommand& c, std::ostream& out);
int runRun(const RunCommand& c, std::ostream& out);

// Validates pass and level names given on the command line; throws UsageError.
void checkPassName(const std::string& name);
void checkLevelName(const std::string& level);
// The Target `--arch` names; a UsageError naming the known ones if there is none.
const Target& checkArch(const std::string& arch);
// The dtype `--dtype` names (f32, f16 or bf16; a UsageError otherwise), nullopt for none given.
std::optional<DType> parseCast(const std::string& text);
// The `--input NAME=SHAPE[:DTYPE]` texts; a UsageError for a malformed one or a name given twice.
std::vector<frontend::InputOverride> parseInputs(const std::vector<std::string>& texts);

// `kiln tune` (src/driver/tune.cpp, issue 46): the schedule space of a model's matrix products. With --dry-run (the
// only mode so far) every candidate is compiled through the Tile passes and tile::verify, and listed with the model's
// prediction, the analytic choice marked; nothing is measured.
struct TuneCommand {
  std::string model;
  std::vector<std::string> inputs;  // --input NAME=SHAPE[:DTYPE]
  std::string dtype;                // --dtype f16|bf16
  std::string arch = kDefaultArch;  // --arch
  bool dryRun = false;              // --dry-run
  bool json = false;                // --json: the spaces as one JSON object
  PipelineOptions pipeline;
};
int runTune(const TuneCommand& c, std::ostream& out);

}  // namespace kiln
