#include "kiln/driver/generate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "kiln/cuda/emitter.h"
#include "kiln/driver/commands.h"
#include "kiln/driver/pipeline.h"
#include "kiln/driver/run_cache.h"
#include "kiln/runtime/runtime.h"
#include "kiln/support/error.h"
#include "decode_gpu.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

// The graph input named `name`, or the forward's argument at `fallback` (state inputs are not arguments).
size_t inputIndex(const torch::Graph& g, const std::string& name, size_t fallback, const char* flag) {
  const size_t arguments = g.inputs.size() - g.states.size();
  if (name.empty()) {
    if (fallback >= arguments)
      userError("{} takes {} argument(s); kiln generate needs token ids and their positions (forward(ids, pos), as the "
                "trace recipe in docs/decode.md makes)", g.modelName, arguments);
    return fallback;
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < arguments; ++i) {
    if (g.values[static_cast<size_t>(g.inputs[i])].name == name) return i;
    names.push_back(g.values[static_cast<size_t>(g.inputs[i])].name);
  }
  usageError("{} {}: {} has no such argument; its arguments are {}", flag, name, g.modelName, fmt::join(names, ", "));
}

// The extent along which index_copy writes a state's values: the positions a KV cache holds (0 when none is written).
int64_t cacheCapacity(const torch::Graph& g) {
  int64_t capacity = 0;
  for (const torch::Node& n : g.nodes) {
    if (n.op != "aten::index_copy") continue;
    const torch::Value& self = g.values[static_cast<size_t>(n.inputs.at(0))];
    const auto* dim = std::get_if<int64_t>(&g.values[static_cast<size_t>(n.inputs.at(1))].constant);
    if (!dim) continue;
    const int64_t d = *dim < 0 ? *dim + static_cast<int64_t>(self.shape.size()) : *dim;
    const int64_t extent = self.shape.at(static_cast<size_t>(d));
    capacity = capacity == 0 ? extent : std::min(capacity, extent);
  }
  return capacity;
}

// The rows of the embedding table the token ids index directly (0 when they feed no aten::embedding).
int64_t vocabularyOf(const torch::Graph& g, int tokenValue) {
  for (const torch::Node& n : g.nodes)
    if (n.op == "aten::embedding" && n.inputs.size() > 1 && n.inputs[1] == tokenValue)
      return g.values[static_cast<size_t>(n.inputs[0])].shape.at(0);
  return 0;
}

// The entry point run by the CPU interpreter.
class InterpretedEntry : public DecodeEntry {
 public:
  InterpretedEntry(kernel::Program p, int64_t tokens) : program_(std::move(p)), tokens_(tokens) {}
  int64_t tokens() const override { return tokens_; }
  std::vector<HostTensor> run(const std::vector<HostTensor>& inputs, bool /*logits*/) override {
    return kernel::interpret(program_, inputs);
  }

 private:
  kernel::Program program_;
  int64_t tokens_;
};

size_t argmax(const std::vector<float>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());  // the first of equal maxima
}

}  // namespace

DecodeInterface describeDecode(const torch::Graph& g, const std::string& tokenInput, const std::string& positionInput) {
  if (g.states.empty())
    userError("{} carries no state (no module buffer its forward writes in place): kiln generate needs a model with a "
              "KV cache; trace transformers' TorchExportableModuleWithStaticCache as docs/decode.md shows", g.modelName);
  DecodeInterface d;
  d.tokenInput = inputIndex(g, tokenInput, 0, "--token-input");
  d.positionInput = inputIndex(g, positionInput, 1, "--position-input");
  if (d.tokenInput == d.positionInput) usageError("--token-input and --position-input name the same argument");
  if (g.inputs.size() - g.states.size() != 2)
    userError("{} takes {} arguments; kiln generate feeds exactly two, the token ids and their positions", g.modelName,
              g.inputs.size() - g.states.size());
  const torch::Value& tokens = g.values[static_cast<size_t>(g.inputs[d.tokenInput])];
  const torch::Value& positions = g.values[static_cast<size_t>(g.inputs[d.positionInput])];
  d.tokenName = tokens.name;
  d.positionName = positions.name;
  if (tokens.dtype != DType::I64 || positions.dtype != DType::I64)
    userError("{}: the token ids ({}) and positions ({}) must be integer (i64) inputs", g.modelName, tokens.name, positions.name);
  const torch::Value& logits = g.values[static_cast<size_t>(g.outputs.at(0))];
  if (logits.shape.size() != 3 || logits.shape[0] != 1 || logits.shape[1] != numel(tokens.shape) ||
      logits.dtype == DType::I64 || logits.dtype == DType::Bool)
    userError("{}: its first output is {}[{}], not logits [1, tokens, vocabulary]; kiln generate runs batch 1 of a model "
              "returning logits first", g.modelName, dtypeName(logits.dtype), shapeString(logits.shape));
  d.capacity = cacheCapacity(g);
  d.vocabulary = vocabularyOf(g, g.inputs[d.tokenInput]);
  for (cuda::ArtifactState& s : artifactStates(g)) {
    d.stateNames.push_back(s.name);
    d.initialState.push_back(std::move(s.initial));
  }
  return d;
}

std::vector<cuda::ArtifactState> artifactStates(const torch::Graph& g) {
  std::vector<cuda::ArtifactState> states;
  for (const torch::State& s : g.states) {
    const torch::Value& v = g.values[static_cast<size_t>(s.input)];
    states.push_back({s.name, HostTensor{v.dtype, v.shape, s.initial->values}});
  }
  return states;
}

std::optional<DecodeInterface> findDecode(const torch::Graph& g) {
  if (g.states.empty()) return std::nullopt;
  try {
    return describeDecode(g, "", "");
  } catch (const UserError&) {  // a model with state that is not a decoder step
    return std::nullopt;
  }
}

cuda::ArtifactEntry artifactEntry(const std::string& name, const Compiled& c, const cuda::Module& module,
                                  const std::optional<DecodeInterface>& decode) {
  cuda::ArtifactEntry e{name, &c.kernelIR, &module, artifactStates(c.torchIR), std::nullopt};
  if (decode) e.decode = cuda::ArtifactDecode{decode->tokenInput, decode->positionInput, decode->capacity, decode->vocabulary};
  return e;
}

namespace {

// The bytes of [offset, offset + bytes) of `file`; UserError naming `what` where the file is shorter.
std::vector<std::byte> readSlice(const fs::path& file, int64_t offset, int64_t bytes, const std::string& what) {
  std::ifstream in(file, std::ios::binary);
  std::error_code ec;
  const auto size = static_cast<int64_t>(fs::file_size(file, ec));
  if (!in || ec || offset > size || bytes > size - offset)
    userError("{}: its initial value [{}, +{}) lies outside {} ({} bytes); compile the directory again", what, offset, bytes,
              file.string(), ec ? 0 : size);
  std::vector<std::byte> out(static_cast<size_t>(bytes));
  in.seekg(offset);
  in.read(reinterpret_cast<char*>(out.data()), bytes);
  if (!in) userError("{}: cannot read its initial value from {}", what, file.string());
  return out;
}

}  // namespace

DecodeInterface describeDecode(const runtime::Manifest& m, const fs::path& dir) {
  const std::string where = (dir / runtime::kManifestFileName).string();
  if (!m.decode || m.states.empty())
    userError("{}: not a decoder step with a KV cache (no 'decode' and 'states'); compile one with kiln compile STEP.pt "
              "--emit cuda -o {} --prefill-chunk C", where, dir.string());
  DecodeInterface d;
  std::vector<int64_t> own;  // the forward's own inputs: not states
  for (int64_t id : m.inputs)
    if (std::none_of(m.states.begin(), m.states.end(), [&](const runtime::StateInfo& s) { return s.input == id; })) own.push_back(id);
  if (own.size() != 2) userError("{}: the step takes {} inputs beside its states; kiln generate feeds two", where, own.size());
  d.tokenInput = static_cast<size_t>(std::find(own.begin(), own.end(), m.decode->tokenInput) - own.begin());
  d.positionInput = static_cast<size_t>(std::find(own.begin(), own.end(), m.decode->positionInput) - own.begin());
  const runtime::BufferInfo* tokens = m.findBuffer(m.decode->tokenInput);
  const runtime::BufferInfo* logits = m.findBuffer(m.outputs.at(0));
  const int64_t t = numel(tokens->shape);
  if (tokens->shape != Shape{1, t} || m.findBuffer(m.decode->positionInput)->shape != Shape{t} || logits->shape.size() != 3 ||
      logits->shape[0] != 1 || logits->shape[1] != t || logits->dtype == DType::I64 || logits->dtype == DType::Bool)
    userError("{}: token ids {}[{}], positions [{}] and a first output {}[{}] are not a decoder step's [1, T], [T] and logits "
              "[1, T, vocabulary]", where, tokens->name, shapeString(tokens->shape),
              shapeString(m.findBuffer(m.decode->positionInput)->shape), logits->name, shapeString(logits->shape));
  d.tokenName = tokens->name;
  d.positionName = m.findBuffer(m.decode->positionInput)->name;
  d.capacity = m.decode->cachePositions;
  d.vocabulary = m.decode->vocabulary;
  for (const runtime::StateInfo& s : m.states) {
    const runtime::BufferInfo* b = m.findBuffer(s.input);
    d.stateNames.push_back(s.name);
    const std::vector<std::byte> bytes =
        readSlice(dir / m.weightsFile, s.initialOffset, b->bytes, fmt::format("{}: state '{}'", where, s.name));
    d.initialState.push_back(fromBytes(b->dtype, b->shape, bytes));
  }
  return d;
}

Generator::Generator(DecodeInterface iface, std::unique_ptr<DecodeEntry> step, std::unique_ptr<DecodeEntry> prefill)
    : iface_(std::move(iface)), step_(std::move(step)), prefill_(std::move(prefill)) {
  KILN_ASSERT(!prefill_ || prefill_->holdsState() == step_->holdsState(), "a step and a prefill entry that keep the state "
              "in different places");
  reset();
}

void Generator::reset() {
  state_ = iface_.initialState;
  position_ = 0;
  dirty_ = false;
  if (step_->holdsState()) step_->resetState(state_);  // (a prefill entry holding state shares the step's)
}

// One forward of `entry` over ids (padded with token 0 to the entry's length) at positions position, position + 1, ...:
// the state advances; the token after the last real one (the real-th) is returned, with its logits where `logits`
// asks or the forward returns no greedy tokens (the host then picks the token from them).
Generator::NextToken Generator::forward(DecodeEntry& entry, const std::vector<int64_t>& ids, int64_t position, int64_t real,
                                        bool logits) {
  const int64_t t = entry.tokens();
  std::vector<HostTensor> inputs(2);
  HostTensor tokens{DType::I64, {1, t}, std::vector<float>(static_cast<size_t>(t), 0.f)};
  HostTensor positions{DType::I64, {t}, std::vector<float>(static_cast<size_t>(t))};
  for (int64_t i = 0; i < t; ++i) {
    if (i < static_cast<int64_t>(ids.size())) tokens.values[static_cast<size_t>(i)] = static_cast<float>(ids[static_cast<size_t>(i)]);
    positions.values[static_cast<size_t>(i)] = static_cast<float>(position + i);
  }
  inputs[iface_.tokenInput] = std::move(tokens);
  inputs[iface_.positionInput] = std::move(positions);
  const bool held = entry.holdsState();
  if (!held) inputs.insert(inputs.end(), state_.begin(), state_.end());
  const bool wanted = logits || !iface_.greedyTokens;
  dirty_ = true;
  std::vector<HostTensor> outputs = entry.run(inputs, wanted);
  ++forwards_;
  const size_t own = iface_.greedyTokens ? 2 : 1;
  KILN_ASSERT(outputs.size() >= own && (held || outputs.size() >= state_.size() + own), "{} outputs for {} states and {}",
              outputs.size(), state_.size(), iface_.greedyTokens ? "logits and tokens" : "logits");
  if (!held) std::copy(outputs.end() - static_cast<std::ptrdiff_t>(state_.size()), outputs.end(), state_.begin());
  NextToken next;
  if (wanted) {
    const HostTensor& all = outputs[0];
    const size_t vocabulary = static_cast<size_t>(all.shape.back());
    auto row = all.values.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(real - 1) * vocabulary);
    next.logits.assign(row, row + static_cast<std::ptrdiff_t>(vocabulary));
  }
  next.token = iface_.greedyTokens ? static_cast<int64_t>(outputs[1].values.at(static_cast<size_t>(real - 1)))
                                   : static_cast<int64_t>(argmax(next.logits));
  return next;
}

void Generator::check(const std::vector<int64_t>& prompt, int maxNewTokens) const {
  if (prompt.empty()) usageError("the prompt is empty: give at least one token id (--prompt-ids 1,2,3)");
  if (maxNewTokens < 1) usageError("--max-new-tokens must be at least 1, not {}", maxNewTokens);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || (iface_.vocabulary > 0 && prompt[i] >= iface_.vocabulary))
      userError("prompt token {} (id {}) is outside the vocabulary of {} ids [0, {})", i, prompt[i], iface_.vocabulary,
                iface_.vocabulary);
  const auto n = static_cast<int64_t>(prompt.size());
  const int64_t needed = n + maxNewTokens - 1;  // the last new token is never fed back
  if (iface_.capacity > 0 && needed > iface_.capacity)
    userError("a prompt of {} tokens and {} new tokens need {} positions, but the cache holds {}; shorten them or trace "
              "the model with a larger max_cache_len", n, maxNewTokens, needed, iface_.capacity);
}

Generator::NextToken Generator::prefill(const std::vector<int64_t>& prompt, bool logits) {
  check(prompt, 1);
  const auto n = static_cast<int64_t>(prompt.size());
  if (dirty_) reset();
  NextToken next;
  for (int64_t p = 0; p < n;) {
    const bool chunked = prefill_ && n - p > 1 && (iface_.capacity == 0 || p + prefill_->tokens() <= iface_.capacity);
    DecodeEntry& entry = chunked ? *prefill_ : *step_;
    const int64_t real = std::min(entry.tokens(), n - p);
    next = forward(entry, std::vector<int64_t>(prompt.begin() + p, prompt.begin() + p + real), p, real, logits && p + real == n);
    p += real;
    position_ = p;
  }
  return next;
}

Generator::NextToken Generator::step(int64_t token, bool logits) {
  if (position_ == 0) userError("a decode step before any prompt: prefill the session first");
  if (token < 0 || (iface_.vocabulary > 0 && token >= iface_.vocabulary))
    userError("token id {} is outside the vocabulary of {} ids [0, {})", token, iface_.vocabulary, iface_.vocabulary);
  if (iface_.capacity > 0 && position_ >= iface_.capacity)
    userError("position {} is past the cache of {} positions; start a new session with a shorter prompt or trace the "
              "model with a larger max_cache_len", position_, iface_.capacity);
  NextToken next = forward(*step_, {token}, position_, 1, logits);
  ++position_;
  return next;
}

std::vector<int64_t> Generator::generate(const std::vector<int64_t>& prompt, int maxNewTokens,
                                         const std::function<void(const std::vector<float>&)>& onLogits) {
  check(prompt, maxNewTokens);
  if (dirty_) reset();  // (not timed: the first token's time is the prompt's forwards)
  times_ = Times{};
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const bool logits = static_cast<bool>(onLogits);
  NextToken next = prefill(prompt, logits);
  std::vector<int64_t> out = prompt;
  Clock::time_point decoded = start;
  for (int i = 0; i < maxNewTokens; ++i) {
    if (onLogits) onLogits(next.logits);
    out.push_back(next.token);
    if (i == 0) {
      decoded = Clock::now();
      times_.toFirstToken = std::chrono::duration<double>(decoded - start).count();
    }
    if (i + 1 < maxNewTokens) {
      next = step(out.back(), logits);
      ++times_.decodeSteps;
    }
  }
  times_.decoding = std::chrono::duration<double>(Clock::now() - decoded).count();
  return out;
}

namespace {

// The model specialised to `tokens` tokens: compiled for the interpreter, or into kiln run's compile cache for the GPU.
struct Specialised {
  torch::Graph torchIR;
  std::unique_ptr<DecodeEntry> entry;
  size_t kernels = 0;
};

// GPU entries share `state` (made by the first).
Specialised specialise(const GenerateCommand& c, const std::string& tokenName, const std::string& positionName,
                       int64_t tokens, std::shared_ptr<DeviceState>& state, std::ostream& log) {
  const std::vector<std::string> overrides = decodeEntryInputs(tokenName, positionName, tokens);
  std::vector<frontend::InputOverride> inputs;
  for (const std::string& o : overrides) inputs.push_back(frontend::parseInputOverride(o));
  const Target& target = checkArch(c.arch);
  PipelineOptions pipeline = c.pipeline;
  pipeline.greedyTokens = true;  // the forward returns the greedy tokens beside the logits
  Specialised s;
  if (c.interpret) {
    Compiled compiled = compileModel(c.model, inputs, pipeline, "kernel", parseCast(c.dtype), target);
    s.kernels = compiled.kernelIR.kernels.size();
    s.torchIR = std::move(compiled.torchIR);
    s.entry = std::make_unique<InterpretedEntry>(std::move(compiled.kernelIR), tokens);
    return s;
  }
  std::string why;
  if (!runtime::gpuAvailable(&why))
    userError("kiln generate needs a CUDA GPU: {}; use --interpret to run the kernels in the CPU interpreter", why);
  const fs::path dir = runCacheDir(RunCacheKey{c.model, overrides, c.dtype, target.arch, passChoicesOf(c.pipeline), "", true});
  const CacheEntryLock lock(dir, log);  // one compile per entry at a time (until this entry is checked or written)
  std::string damage;
  const bool cached = usableCacheEntry(dir, &damage);
  if (!damage.empty()) log << fmt::format("kiln: the cache entry is damaged ({}); compiling it again\n", damage);
  Compiled compiled = compileModel(c.model, inputs, pipeline, cached ? "torch" : "cuda", parseCast(c.dtype), target);
  std::vector<cuda::ArtifactState> states = artifactStates(compiled.torchIR);
  if (!cached) {
    cuda::writeArtifacts({cuda::ArtifactEntry{"", &compiled.kernelIR, &compiled.cudaIR, states, std::nullopt}}, dir,
                         cuda::ArtifactOptions{target.arch, true});
    log << fmt::format("kiln: compiled the {}-token entry into the cache {}\n", tokens, dir.string());
  }
  if (!state) {
    std::vector<HostTensor> initial;
    for (cuda::ArtifactState& s : states) initial.push_back(std::move(s.initial));
    state = std::make_shared<DeviceState>(initial);
  }
  auto entry = std::make_unique<GpuEntry>(dir, "", /*filesChecked=*/true, tokens, state);
  s.kernels = entry->kernels();
  s.torchIR = std::move(compiled.torchIR);
  s.entry = std::move(entry);
  return s;
}

void saveLogits(const std::string& dir, size_t index, const std::vector<float>& logits) {
  std::ofstream f(fs::path(dir) / fmt::format("logits{}.bin", index), std::ios::binary);
  f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!f) userError("--save-logits {}: cannot write logits{}.bin", dir, index);
}

}  // namespace

std::pair<std::string, std::string> decodeInputNames(const std::string& model, const std::string& tokenInput,
                                                     const std::string& positionInput) {
  const std::vector<std::string> names = frontend::inputNames(model);
  for (const auto& [flag, name] : {std::pair{"--token-input", tokenInput}, std::pair{"--position-input", positionInput}})
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end())
      usageError("{} {}: {} has no such argument; its arguments are {}", flag, name, model, fmt::join(names, ", "));
  auto nameOf = [&](const std::string& given, size_t at) { return given.empty() && at < names.size() ? names[at] : given; };
  std::pair<std::string, std::string> both{nameOf(tokenInput, 0), nameOf(positionInput, 1)};
  if (both.first.empty() || both.second.empty())
    userError("{} takes {} argument(s); a decoder step takes token ids and their positions (forward(ids, pos))", model,
              names.size());
  return both;
}

std::vector<std::string> decodeEntryInputs(const std::string& tokenName, const std::string& positionName, int64_t tokens) {
  return {fmt::format("{}=1x{}:i64", tokenName, tokens), fmt::format("{}={}:i64", positionName, tokens)};
}

namespace {

// What kiln generate runs: the entries and the interface of the model, and what the log says of them.
struct Prepared {
  DecodeInterface iface;
  std::unique_ptr<DecodeEntry> step, prefill;
  std::string modelName, how;  // how: "compiled in 1.2 s" or "loaded from DIR"
  size_t stepKernels = 0, prefillKernels = 0;
  int64_t prefillTokens = 0;
};

// A .pt decoder step: specialised to 1 token (and to --prefill-chunk C), compiled for the interpreter or the GPU.
Prepared prepareTrace(const GenerateCommand& c, std::ostream& log) {
  const auto [tokenName, positionName] = decodeInputNames(c.model, c.tokenInput, c.positionInput);
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<DeviceState> deviceState;  // the GPU entries' state, shared
  Specialised step = specialise(c, tokenName, positionName, 1, deviceState, log);
  Prepared p;
  p.iface = describeDecode(step.torchIR, tokenName, positionName);
  p.iface.greedyTokens = true;  // (specialise compiles the entries with PipelineOptions::greedyTokens)
  if (c.prefillChunk > 1) {
    Specialised prefill = specialise(c, tokenName, positionName, c.prefillChunk, deviceState, log);
    p.prefill = std::move(prefill.entry);
    p.prefillKernels = prefill.kernels;
    p.prefillTokens = c.prefillChunk;
  }
  p.step = std::move(step.entry);
  p.stepKernels = step.kernels;
  p.modelName = step.torchIR.modelName;
  p.how = fmt::format("compiled in {:.1f} s", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return p;
}

// A directory kiln compile --emit cuda wrote from a decoder step: its entries as compiled (the step, and the prefill
// chunk where it holds one), the interface and initial state its manifest records. GPU only.
Prepared prepareDirectory(const GenerateCommand& c) {
  if (c.interpret) usageError("--interpret runs Kernel IR, which {} does not hold: give kiln generate the .pt", c.model);
  if (c.prefillChunk != 0 || !c.tokenInput.empty() || !c.positionInput.empty() || !c.dtype.empty() ||
      !c.pipeline.enable.empty() || !c.pipeline.disable.empty())
    usageError("{} was compiled with its inputs, chunk, dtype and passes fixed: drop --prefill-chunk, --token-input, "
               "--position-input, --dtype, --enable-pass and --disable-pass, or compile the .pt again", c.model);
  const runtime::Manifest m = runtime::readManifest(c.model);
  Prepared p;
  p.iface = describeDecode(m, c.model);
  if (const int64_t t = numel(m.findBuffer(m.decode->tokenInput)->shape); t != 1)
    userError("{}: its manifest.json takes {} tokens per forward; kiln generate needs the decode step (1 token) there: "
              "compile the .pt with kiln compile --emit cuda --prefill-chunk C", c.model, t);
  std::string why;
  if (!runtime::gpuAvailable(&why))
    userError("kiln generate {} needs a CUDA GPU: {}; --interpret runs the .pt it was compiled from on the CPU", c.model, why);
  auto state = std::make_shared<DeviceState>(p.iface.initialState);
  auto step = std::make_unique<GpuEntry>(c.model, "", false, 1, state);
  const GpuEntry* stepEntry = step.get();  // the prefill entry shares its weights
  p.stepKernels = step->kernels();
  p.step = std::move(step);
  std::error_code ec;
  if (fs::exists(fs::path(c.model) / runtime::manifestFileName("prefill"), ec)) {
    const runtime::Manifest chunk = runtime::readManifest(c.model, "prefill");
    const DecodeInterface chunkIface = describeDecode(chunk, c.model);
    const int64_t tokens = numel(chunk.findBuffer(chunk.decode->tokenInput)->shape);
    if (chunkIface.stateNames != p.iface.stateNames || chunkIface.capacity != p.iface.capacity)
      userError("{}: the prefill entry's states or cache differ from the decode step's; compile the directory again", c.model);
    auto prefill = std::make_unique<GpuEntry>(c.model, "prefill", false, tokens, state, stepEntry);
    p.prefillKernels = prefill->kernels();
    p.prefillTokens = tokens;
    p.prefill = std::move(prefill);
  }
  p.modelName = m.model;
  p.how = "loaded from " + c.model;
  return p;
}

}  // namespace

int runGenerate(const GenerateCommand& c, std::ostream& out, std::ostream& log) {
  if (c.prefillChunk < 0) usageError("--prefill-chunk must be 0 (token by token) or a number of tokens, not {}", c.prefillChunk);
  if (c.maxNewTokens < 1) usageError("--max-new-tokens must be at least 1, not {}", c.maxNewTokens);
  if (c.promptIds.empty()) usageError("the prompt is empty: give at least one token id (--prompt-ids 1,2,3)");
  if (!c.logitsDir.empty()) {
    std::error_code ec;
    if (fs::exists(c.logitsDir, ec) && !(fs::is_directory(c.logitsDir, ec) && fs::is_empty(c.logitsDir, ec)))
      usageError("--save-logits {}: not a new or empty directory; name one that is", c.logitsDir);
  }
  std::error_code ec;
  Prepared p = fs::is_directory(c.model, ec) ? prepareDirectory(c) : prepareTrace(c, log);
  int64_t stateBytes = 0;
  for (const HostTensor& s : p.iface.initialState) stateBytes += numel(s.shape) * dtypeBytes(s.dtype);
  const size_t states = p.iface.stateNames.size();
  const int64_t capacity = p.iface.capacity;
  Generator generator(std::move(p.iface), std::move(p.step), std::move(p.prefill));
  generator.check(c.promptIds, c.maxNewTokens);  // before anything is printed or run
  log << fmt::format("kiln: {}: decode step {} kernels{}; {} states ({:.2f} MB), the cache holds {} positions; {}\n",
                     p.modelName, p.stepKernels,
                     p.prefillTokens > 0 ? fmt::format(", prefill chunk of {} tokens {} kernels", p.prefillTokens, p.prefillKernels) : "",
                     states, stateBytes / 1e6, capacity, p.how);
  if (!c.logitsDir.empty()) fs::create_directories(c.logitsDir);
  size_t saved = 0;
  std::function<void(const std::vector<float>&)> onLogits;  // only with --save-logits: the logits stay on the GPU
  if (!c.logitsDir.empty()) onLogits = [&](const std::vector<float>& logits) { saveLogits(c.logitsDir, saved++, logits); };
  std::vector<int64_t> ids = generator.generate(c.promptIds, c.maxNewTokens, onLogits);
  const Generator::Times& t = generator.times();
  log << fmt::format("kiln: {} prompt tokens, {} new tokens in {} forwards on {}: first token after {:.3f} ms, then {}\n",
                     c.promptIds.size(), c.maxNewTokens, generator.forwards(), c.interpret ? "the CPU interpreter" : "the GPU",
                     t.toFirstToken * 1e3,
                     t.decodeSteps > 0 ? fmt::format("{:.3f} ms per token ({:.1f} tokens/s)", t.decoding * 1e3 / t.decodeSteps,
                                                     t.decodeSteps / t.decoding)
                                       : std::string("no decode step"));
  out << fmt::format("{}\n", fmt::join(ids, ","));
  return 0;
}

}  // namespace kiln
