// tensor-shard (issue 51, item 1): the Tensor IR of a decoder split over 2 and 4 ranks, checked by evaluating every
// rank side by side (tensor::evaluate, an AllReduce summing over them) against the unsplit graph and LibTorch; the
// rule's shapes and all-reduces IR in / IR out; its refusals in one line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_support.h"
#include "kiln/driver/pipeline.h"
#include "kiln/frontend/frontend.h"
#include "kiln/support/error.h"
#include "kiln/tensor/ir.h"
#include "test_support.h"

namespace kiln::tensor {
namespace {

// The fixture's Tensor IR as tensor-shard sees it in the pipeline: lowered from Torch, its index maps composed.
Graph lowered(const std::string& fixture) {
  Compiled c = compileModel(test::fixturePath(fixture), {}, PipelineOptions{}, "torch");
  Graph g = lowerFromTorch(c.torchIR);
  composeIndexMaps(g);
  return g;
}

std::vector<Graph> ranksOf(const Graph& g, int ranks) {
  std::vector<Graph> out;
  for (int r = 0; r < ranks; ++r) {
    out.push_back(g);
    shardForTensorParallel(out.back(), ranks, r);
  }
  return out;
}

std::vector<HostTensor> idsFor(const Graph& g, uint64_t seed) {
  std::vector<HostTensor> in;
  for (int i : g.inputs) in.push_back(randomTensor(g.nodes[static_cast<size_t>(i)].dtype, g.nodes[static_cast<size_t>(i)].shape, seed++));
  return in;
}

int count(const Graph& g, Node::Kind kind) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == kind;
  return n;
}

const Node* weightNamed(const Graph& g, const std::string& suffix) {
  for (const Node& n : g.nodes)
    if (n.kind == Node::Kind::Weight && n.name.size() >= suffix.size() &&
        n.name.compare(n.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return &n;
  return nullptr;
}

// Every rank evaluated side by side gives the unsplit graph's outputs, which are LibTorch's.
void expectSplitMatches(const std::string& fixture, int ranks) {
  SCOPED_TRACE(fixture + " over " + std::to_string(ranks) + " ranks");
  const Graph whole = lowered(fixture);
  const std::vector<Graph> parts = ranksOf(whole, ranks);
  ASSERT_GT(count(parts[0], Node::Kind::AllReduce), 0) << "nothing was split";
  std::vector<const Graph*> rankPtrs;
  for (const Graph& g : parts) rankPtrs.push_back(&g);
  const std::vector<HostTensor> in = idsFor(whole, 7);
  const std::vector<HostTensor> want = evaluate({&whole}, in);
  const std::vector<HostTensor> got = evaluate(rankPtrs, in);
  const std::vector<HostTensor> torch = frontend::runReference(test::fixturePath(fixture), in, false);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    const Comparison split = compare(got[o], want[o]), reference = compare(want[o], torch.at(o));
    EXPECT_LE(split.relL2, 1e-5) << "output " << o;
    EXPECT_LE(reference.relL2, 1e-5) << "output " << o << ": the unsplit evaluation against LibTorch";
  }
}

TEST(TensorShard, TwoRanksOfATinyLlamaMatchTheWholeModel) { expectSplitMatches("hf_llama_tiny", 2); }
TEST(TensorShard, TwoRanksOfQwen2WithBiasesMatch) { expectSplitMatches("hf_qwen2_tiny", 2); }
TEST(TensorShard, TwoRanksOfTheLlamaFixtureMatch) { expectSplitMatches("llama_tiny", 2); }
TEST(TensorShard, FourRanksOfAGatedMlpAndOfAttentionMatch) {
  expectSplitMatches("mlp", 4);
  expectSplitMatches("attention", 4);
}
// Every other family the rule splits (their attention, MLP or experts; MLA's attention stays whole: no q_proj).
TEST(TensorShard, TheOtherFamiliesItSplitsMatch) {
  for (const char* f : {"hf_mistral_tiny", "hf_qwen3_tiny", "hf_gemma2_tiny", "hf_cohere_tiny", "hf_stablelm_tiny",
                        "hf_olmo_tiny", "hf_phi_tiny", "hf_gptj_tiny", "hf_mixtral_tiny", "hf_qwen2_moe_tiny_grouped",
                        "hf_deepseek_v3_tiny", "hf_gpt_oss_tiny"})
    expectSplitMatches(f, 2);
  for (const char* f : {"hf_olmo_tiny", "hf_phi_tiny", "hf_gptj_tiny", "hf_deepseek_v3_tiny"}) expectSplitMatches(f, 4);
}

TEST(TensorShard, EachRankHoldsItsHeadsAndTwoAllReducesALayer) {
  const Graph whole = lowered("hf_llama_tiny");  // 2 layers, 4 heads and 2 key/value heads of 16, intermediate 128
  const std::vector<Graph> parts = ranksOf(whole, 2);
  const Graph& r1 = parts[1];
  EXPECT_EQ(count(whole, Node::Kind::AllReduce), 0);
  EXPECT_EQ(count(r1, Node::Kind::AllReduce), 4) << print(r1);  // after o_proj and down_proj, in each layer
  EXPECT_EQ(r1.nodes.size(), whole.nodes.size() + 4);
  const Node* q = weightNamed(r1, "layers.0.self_attn.q_proj.weight");
  const Node* k = weightNamed(r1, "layers.0.self_attn.k_proj.weight");
  const Node* o = weightNamed(r1, "layers.0.self_attn.o_proj.weight");
  const Node* down = weightNamed(r1, "layers.0.mlp.down_proj.weight");
  const Node* norm = weightNamed(r1, "layers.0.input_layernorm.weight");
  ASSERT_TRUE(q && k && o && down && norm) << print(r1);
  EXPECT_EQ(q->shape, (Shape{32, 64}));     // rows: 2 of the 4 query heads
  EXPECT_EQ(k->shape, (Shape{16, 64}));     // 1 of the 2 key/value heads
  EXPECT_EQ(o->shape, (Shape{64, 32}));     // columns: the heads this rank attended
  EXPECT_EQ(down->shape, (Shape{64, 64}));  // columns: half the intermediate
  EXPECT_EQ(norm->shape, (Shape{64}));      // whole on every rank
  // Rank 1 keeps the second half of q_proj's rows and of o_proj's columns.
  const Node* wholeQ = weightNamed(whole, "layers.0.self_attn.q_proj.weight");
  const Node* wholeO = weightNamed(whole, "layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(q->weight->values.at(0), wholeQ->weight->values.at(32 * 64));
  EXPECT_EQ(o->weight->values.at(1), wholeO->weight->values.at(33));
  // Every rank's graph has the same nodes and shapes.
  ASSERT_EQ(parts[0].nodes.size(), r1.nodes.size());
  for (size_t i = 0; i < r1.nodes.size(); ++i) EXPECT_EQ(parts[0].nodes[i].shape, r1.nodes[i].shape) << i;
  // The all-reduce follows the product's sum, and what read the sum reads it.
  for (size_t i = 0; i < r1.nodes.size(); ++i)
    if (r1.nodes[i].kind == Node::Kind::AllReduce) {
      const Node& sum = r1.nodes[static_cast<size_t>(r1.nodes[i].operands[0].node)];
      EXPECT_EQ(sum.kind, Node::Kind::Reduce);
      EXPECT_EQ(r1.nodes[i + 1].operands.at(0).node, static_cast<int>(i)) << print(r1);
    }
}

// Runs f, expecting a UserError whose one-line message holds every needle.
template <typename F>
void expectRefused(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected a refusal";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

TEST(TensorShard, RefusesWhatItCannotSplit) {
  const Graph llama = lowered("hf_llama_tiny");
  // 2 key/value heads over 4 ranks.
  expectRefused([&] { ranksOf(llama, 4); }, {"--tensor-parallel 4", "aten::view", "cannot follow", "must divide"});
  expectRefused([&] { ranksOf(lowered("linear"), 2); }, {"--tensor-parallel", "no weight named", "q_proj"});
  // Phi-3's gate_up_proj holds gate and up stacked: split by rows, one rank would get all of gate.
  expectRefused([&] { ranksOf(lowered("hf_phi3_tiny"), 2); }, {"aten::slice", "gate_up_proj are not split"});
  // A decoder step's KV cache (a state) would be split with its heads: not built yet.
  expectRefused([&] { ranksOf(lowered("hf_llama_decode_tiny"), 2); }, {"cache", "is an input and would be split"});
  expectRefused([&] {
    Graph g = llama;
    shardForTensorParallel(g, 2, 2);
  }, {"rank 2 is not one of 0 to 1"});
}

TEST(TensorShard, TheCommandLineShowsARanksTensorIRAndRefusesTheRest) {
  using namespace test::cli;  // NOLINT(google-build-using-namespace): the CLI helpers
  Result r = kiln({"compile", "models/fixtures/hf_llama_tiny.pt", "--tensor-parallel", "2", "--rank", "1", "--ir", "tensor"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "all_reduce sum(%")) << describe(r);
  expectOneLineError(kiln({"compile", "models/fixtures/hf_llama_tiny.pt", "--tensor-parallel", "2"}), 1,
                     {"all-reduce cannot be lowered below the Tensor level yet", "--ir tensor"});
  expectOneLineError(kiln({"compile", "models/fixtures/hf_llama_tiny.pt", "--tensor-parallel", "2", "--rank", "2",
                           "--ir", "tensor"}), 1, {"rank 2 is not one of 0 to 1"});
  expectOneLineError(kiln({"compile", "models/fixtures/hf_llama_tiny.pt", "--tensor-parallel", "4", "--ir", "tensor"}), 1,
                     {"--tensor-parallel 4", "must divide"});
}

TEST(TensorShard, OneRankChangesNothing) {
  const Graph whole = lowered("hf_llama_tiny");
  Graph g = whole;
  shardForTensorParallel(g, 1, 0);
  EXPECT_EQ(print(g), print(whole));
}

}  // namespace
}  // namespace kiln::tensor
