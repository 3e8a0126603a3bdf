// `kiln run --check --interpret --bisect` (issue 53 item 7; on a GPU the same comparison reads the arena kernel by
// kernel, which these CPU tests cannot run): when a check fails, the first kernel whose output differs
// from LibTorch's value of the same TorchScript value is named. The faults are made on purpose with
// KILN_TEST_PERTURB_KERNEL (src/driver/bisect.h), which adds 1 to everything one kernel writes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.h"
#include "test_support.h"

namespace kiln {
namespace {
using namespace test::cli;
using nlohmann::json;

// KILN_TEST_PERTURB_KERNEL for the kiln processes a test starts, unset again at the end of the scope.
struct Perturb {
  explicit Perturb(const std::string& kernel) { setenv("KILN_TEST_PERTURB_KERNEL", kernel.c_str(), 1); }
  ~Perturb() { unsetenv("KILN_TEST_PERTURB_KERNEL"); }
};

json bisectReport(const Result& r) {
  EXPECT_EQ(r.code, 1) << describe(r);
  const json j = json::parse(r.out);
  EXPECT_FALSE(j["check"]["passed"].get<bool>()) << j.dump(1);
  return j["bisect"];
}

// mlp: k0 computes silu(gate(x)) * up(x) into t3 (the value of the aten::mul), k1 the down product into the output.
TEST(CliBisect, NamesThePerturbedKernelOfAnMlp) {
  const std::string mlp = test::fixturePath("mlp");
  {
    Perturb fault("k1_reduce_sum");
    const json b = bisectReport(kiln({"run", mlp, "--interpret", "--check", "--bisect", "--json"}));
    ASSERT_EQ(b["compared"], 2) << b.dump(1);
    EXPECT_EQ(b["first_difference"]["kernel"], "k1_reduce_sum") << b.dump(1);
    EXPECT_TRUE(b["values"][0]["passed"].get<bool>()) << b.dump(1);
    EXPECT_EQ(b["values"][0]["kernel"], "k0_reduce_sum");
    EXPECT_NE(b["values"][0]["op"].get<std::string>().find("aten::mul"), std::string::npos) << b.dump(1);
  }
  Perturb fault("k0_reduce_sum");
  Result r = kiln({"run", mlp, "--interpret", "--check", "--bisect"});
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_TRUE(contains(r.out, "adding 1 to every element kernel k0_reduce_sum writes")) << describe(r);
  EXPECT_TRUE(contains(r.out, "the first kernel whose output differs from LibTorch's: k0_reduce_sum (it writes t3, the "
                              "value of aten::mul @ mlp.py:15), after no kernel output that agrees"))
      << describe(r);
}

// A whole tiny Llama in f32, unperturbed: every kernel output with a TorchScript value agrees at the f32 tolerance (no
// false alarm to send a user the wrong way); perturbing a product in the second layer names that product.
TEST(CliBisect, ATinyLlamaAgreesEverywhereUntilAKernelIsPerturbed) {
  const std::string llama = test::fixturePath("hf_llama_tiny");
  Result clean = kiln({"run", llama, "--interpret", "--check", "--bisect", "--json"});
  ASSERT_EQ(clean.code, 0) << describe(clean);
  const json all = json::parse(clean.out)["bisect"];
  EXPECT_TRUE(all["first_difference"].is_null()) << all.dump(1);
  ASSERT_GE(all["compared"].get<int>(), 8) << all.dump(1);
  // The middle compared kernel output, perturbed: the bisect names its kernel and passes every one before it.
  const json& middle = all["values"][all["values"].size() / 2];
  const std::string kernel = middle["kernel"];
  Perturb fault(kernel);
  const json b = bisectReport(kiln({"run", llama, "--interpret", "--check", "--bisect", "--json"}));
  EXPECT_EQ(b["first_difference"]["kernel"], kernel) << b.dump(1);
  for (const json& v : b["values"])
    if (v["kernel"] != kernel) EXPECT_TRUE(v["passed"].get<bool>()) << v.dump();
}

// A grouped_mm Mixtral sorts its rows by expert and scatters them back: between the two, values depend on the order of
// equal keys, which the bisect's LibTorch run makes kiln's (a stable sort). Unperturbed, every compared value agrees,
// the sort's permutation (exact) among them.
TEST(CliBisect, AGroupedMixtralAgreesThroughItsSortedRows) {
  Result r = kiln({"run", test::fixturePath("hf_mixtral_tiny_grouped"), "--interpret", "--check", "--bisect", "--json"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const json b = json::parse(r.out)["bisect"];
  EXPECT_TRUE(b["first_difference"].is_null()) << b.dump(1);
  bool sawSort = false;
  for (const json& v : b["values"]) sawSort = sawSort || v["op"].get<std::string>().rfind("aten::sort", 0) == 0;
  EXPECT_TRUE(sawSort) << b.dump(1);
}

// bf16: judged as the check judges bf16 outputs, against the f32 evaluation (DESIGN.md §4).
TEST(CliBisect, Bf16ValuesAreJudgedAgainstTheF32Evaluation) {
  const std::string attention = test::fixturePath("attention_bf16");
  Result clean = kiln({"run", attention, "--interpret", "--check", "--bisect", "--json", "-v"});
  ASSERT_EQ(clean.code, 0) << describe(clean);
  const json all = json::parse(clean.out)["bisect"];
  ASSERT_GE(all["compared"].get<int>(), 1) << all.dump(1);
  EXPECT_NE(all["values"][0]["rule"].get<std::string>().find("against f32"), std::string::npos) << all.dump(1);
  Perturb fault(all["values"][0]["kernel"].get<std::string>());
  const json b = bisectReport(kiln({"run", attention, "--interpret", "--check", "--bisect", "--json"}));
  EXPECT_EQ(b["first_difference"]["kernel"], all["values"][0]["kernel"]) << b.dump(1);
}

TEST(CliBisect, RefusesWhatItCannotBisect) {
  const std::string mlp = test::fixturePath("mlp");
  expectOneLineError(kiln({"run", mlp, "--interpret", "--bisect"}), 2, {"--bisect", "add --check"});
  // An emitted directory records no IR: which value a kernel output holds is known only when compiling.
  test::TempDir dir;
  Result emit = kiln({"compile", mlp, "--emit", "cuda", "-o", (dir.path / "out").string()});
  ASSERT_EQ(emit.code, 0) << describe(emit);
  expectOneLineError(kiln({"run", (dir.path / "out").string(), "--check", "--reference", mlp, "--bisect"}), 2,
                     {"--bisect", "run the .pt"});
  // A model with state (a static cache): LibTorch's values inside its forward are not read back yet.
  Result r = kiln({"run", test::fixturePath("hf_llama_decode_tiny"), "--interpret", "--check", "--bisect"});
  expectOneLineError(r, 1, {"--bisect", "without state"});
}

}  // namespace
}  // namespace kiln
