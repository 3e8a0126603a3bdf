// `kiln generate`: greedy text generation with a model that carries its KV cache as state (docs/decode.md).
//
// The model is a trace of a decoder step that takes token ids and their positions and returns logits, writing its
// keys and values into module buffers (transformers' TorchExportableModuleWithStaticCache traced through
// forward(ids, pos)); the import makes those buffers the model's state (kiln/torch/ir.h State). One trace serves
// every entry point: it is specialised to T = 1 for the decode step and to T = C for prefill chunks (--prefill-chunk),
// each a compilation of its own from the same file, sharing the state by name and order.
#pragma once
#include <chrono>
#include <filesystem>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/cuda/emitter.h"
#include "kiln/driver/pipeline.h"
#include "kiln/runtime/manifest.h"
#include "kiln/support/host_tensor.h"
#include "kiln/support/pipeline.h"
#include "kiln/support/target.h"
#include "kiln/torch/ir.h"

namespace kiln {

struct GenerateCommand {
  std::string model;                 // a .pt decoder-step trace, or a directory kiln compile --emit cuda wrote from one
  std::vector<int64_t> promptIds;    // --prompt-ids 1,2,3
  int maxNewTokens = 16;             // --max-new-tokens N
  int prefillChunk = 0;              // --prefill-chunk C: the prompt in chunks of C tokens; 0: one token at a time
  bool interpret = false;            // --interpret: the Kernel IR in the CPU interpreter
  std::string tokenInput;            // --token-input NAME (default: the forward's first argument)
  std::string positionInput;         // --position-input NAME (default: its second)
  std::string logitsDir;             // --save-logits DIR: each forward's logits of the last real token, raw f32
  std::string dtype;                 // --dtype f16|bf16
  std::string arch = kDefaultArch;
  PipelineOptions pipeline;
};

// What generation needs to know of a model, read from its Torch IR (at any T).
struct DecodeInterface {
  size_t tokenInput = 0, positionInput = 1;  // positions among the graph's inputs
  std::string tokenName, positionName;
  int64_t capacity = 0;  // positions the cache holds (the extent index_copy writes along); 0 when unknown
  int64_t vocabulary = 0;  // rows of the embedding the token ids index; 0 when unknown
  std::vector<std::string> stateNames;  // in the order the forward takes and returns them
  std::vector<HostTensor> initialState; // the archive's values, in the states' dtypes and shapes
  // The forward's second output is the greedy token at every position (PipelineOptions::greedyTokens, i64 [1, T]): each new token
  // is read from it, and the logits are fetched only for those who want them. Otherwise the host takes the argmax.
  bool greedyTokens = false;
};
// UserError (one line) for a model without state, without a token and a position input, or whose first output is
// not logits [1, T, vocabulary].
DecodeInterface describeDecode(const torch::Graph& g, const std::string& tokenInput, const std::string& positionInput);

// The model's states with the archive's values, in the order its forward takes them (an emitted directory records
// them: cuda::ArtifactEntry::states), and a decoder step's interface as an emitted directory records it.
std::vector<cuda::ArtifactState> artifactStates(const torch::Graph& g);
// The model's decode interface with the default inputs (the forward's first two arguments), or none where the model
// is not a decoder step with state (what describeDecode refuses).
std::optional<DecodeInterface> findDecode(const torch::Graph& g);
// The entry `name` of an emitted directory (cuda::writeArtifacts) for a compiled model: its program and CUDA, its states,
// and `decode` where given.
cuda::ArtifactEntry artifactEntry(const std::string& name, const Compiled& c, const cuda::Module& module,
                                  const std::optional<DecodeInterface>& decode);
// The decode interface an emitted directory's manifest records (format 7: states and decode), the states' initial
// values read from its weights file. UserError (one line, naming the directory) for a manifest without them, or a
// weights file too short for them.
DecodeInterface describeDecode(const runtime::Manifest& m, const std::filesystem::path& dir);

// One entry point: the model specialised to `tokens` tokens per forward. run() takes the forward's inputs followed by
// the states' current values and returns its outputs followed by the states' new values; without `logits` the first
// output (the logits) may come back empty (an entry on the GPU then leaves it in device memory).
// An entry that holds the state itself (holdsState(): on the GPU, in device buffers a decode step and a prefill chunk
// share) takes and returns only the forward's own tensors; resetState() sets the state it holds (for entries sharing
// it, once through any of them).
class DecodeEntry {
 public:
  virtual ~DecodeEntry() = default;
  virtual int64_t tokens() const = 0;
  virtual std::vector<HostTensor> run(const std::vector<HostTensor>& inputs, bool logits) = 0;
  virtual bool holdsState() const { return false; }
  virtual void resetState(const std::vector<HostTensor>& /*state*/) {}
};

// Greedy generation over a decode step and an optional prefill entry: the state starts from the values in the
// archive; a prompt is written chunk by chunk (the last chunk padded with token 0 at the following positions, which
// the causal mask hides and later steps overwrite); each new token is the argmax of the last real token's logits
// (the first of equal maxima, as torch.argmax), read from the forward's greedy tokens where it returns them
// (DecodeInterface::greedyTokens), else taken on the host. Positions past the cache, an empty prompt and token ids outside the
// vocabulary are UserErrors raised before anything runs, leaving the state as it was.
class Generator {
 public:
  Generator(DecodeInterface iface, std::unique_ptr<DecodeEntry> step, std::unique_ptr<DecodeEntry> prefill);
  // The next token after the last real one fed, and (where `logits` is asked for, or the forward returns no greedy
  // tokens) the logits it was chosen from.
  struct NextToken {
    int64_t token = 0;
    std::vector<float> logits;
  };
  // A session: prefill() starts from the archive's state and runs the prompt (in chunks where there is a prefill
  // entry); each step() feeds one token at the next position. Both return the greedy next token. UserError (the state
  // left as it was) for a prompt check() refuses, a step before any prefill, a token outside the vocabulary, or a step
  // past the cache.
  NextToken prefill(const std::vector<int64_t>& prompt, bool logits = false);
  NextToken step(int64_t token, bool logits = false);
  int64_t position() const { return position_; }  // the positions written so far (0 before a prefill)
  // prefill, then maxNewTokens - 1 steps: the prompt followed by maxNewTokens generated ids. `onLogits` (may be empty)
  // sees the logits each new token was chosen from.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int maxNewTokens,
                                const std::function<void(const std::vector<float>&)>& onLogits = {});
  // The UserError (UsageError for an empty prompt or no new tokens) generate() would raise for these arguments.
  void check(const std::vector<int64_t>& prompt, int maxNewTokens) const;
  // The state back to the archive's values (an upload where the entries hold it; prefill() does it where a forward ran
  // since, generate() before its clock starts).
  void reset();
  int forwards() const { return forwards_; }
  // Of the last generate(): seconds until the first new token was chosen (the prompt's forwards), and the seconds and
  // number of the decode steps after it (wall clock around the entries' run(), argmax and state included).
  struct Times {
    double toFirstToken = 0, decoding = 0;
    int decodeSteps = 0;
  };
  const Times& times() const { return times_; }

 private:
  NextToken forward(DecodeEntry& entry, const std::vector<int64_t>& ids, int64_t position, int64_t real, bool logits);
  DecodeInterface iface_;
  std::unique_ptr<DecodeEntry> step_, prefill_;
  std::vector<HostTensor> state_;
  int64_t position_ = 0;
  bool dirty_ = false;  // a forward has run since the last reset(): the next prefill() resets first
  int forwards_ = 0;
  Times times_;
};

// The names of a decoder step's token and position inputs: those given (UsageError for a name the model's forward does
// not take), or its first and second argument (UserError for a forward of fewer).
std::pair<std::string, std::string> decodeInputNames(const std::string& model, const std::string& tokenInput,
                                                     const std::string& positionInput);
// The --input overrides that specialise a decoder step to `tokens` tokens per forward: ids 1 x tokens, positions tokens.
std::vector<std::string> decodeEntryInputs(const std::string& tokenName, const std::string& positionName, int64_t tokens);

// The command: stdout gets one line, the prompt and generated ids comma-separated; the rest goes to `log`.
int runGenerate(const GenerateCommand& c, std::ostream& out, std::ostream& log);

}  // namespace kiln
