#include "kiln/tensor/op_catalog.h"

#include <fmt/format.h>

#include <iterator>

namespace kiln::tensor {
namespace {

constexpr const char* kUnary = "elementwise, computed in f32 (stored in the result's dtype)";
constexpr const char* kCompare = "elementwise comparison; a tensor or a scalar on either side, broadcasting; bool result";
constexpr const char* kIdentity = "the identity (no copy); memory-format and device arguments are ignored";
constexpr const char* kReshape = "one IndexMap to LibTorch's result shape (the size arguments are not needed)";
constexpr const char* kMatmulRefusal = "operands whose inner dimensions differ";
constexpr const char* kSplit =
    "at import, on input data: one `aten::slice` per part at the offsets LibTorch's part shapes give (its list then "
    "holds ordinary tensors); on constants, folded";
constexpr const char* kSplitRefusal = "a part with no elements (leave the empty part out of the model)";
constexpr const char* kConstantOfShape =
    "at import: a constant from the input's shape and dtype only (of a 0-d input, an immediate operand)";
constexpr const char* kConstantRefusal = "as the model's output (a constant: kiln compiles outputs computed from inputs)";

// The table itself, outside any function: it is data, one entry an op, not code to read as one long function.
const OpEntry kOps[] = {
    {"aten::add", "`x + alpha·y`; a tensor, a scalar or a 0-d constant on either side; broadcasting (add_ likewise)",
     "two constant operands; add_ on a view, an input, a weight or a tensor read elsewhere"},
    {"aten::argmax",
     "the first index of the maximum along `dim` (over the flattened x without one), NaN counting as the maximum, "
     "keepdim; i64 result",
     "more than 2^24 positions along the reduced dimension"},
    {"aten::sub", "`x - alpha·y`, as add", "two constant operands; sub_ as add_"},
    {"aten::rsub", "`other - alpha·x`; other a tensor or a scalar", ""},
    {"aten::mul", "`x · y`; a tensor or a scalar on either side; broadcasting (mul_ as add_)", "mul_ as add_"},
    {"aten::div", "true division `x / y` (an i64 or bool result is f32, as PyTorch); div_ as add_",
     "`rounding_mode` 'trunc' or 'floor'; div_ as add_"},
    {"aten::neg", kUnary, ""},
    {"aten::exp", kUnary, ""},
    {"aten::rsqrt", kUnary, ""},
    {"aten::sqrt", kUnary, ""},
    {"aten::pow", "`x ^ e` for a scalar (or 0-d constant) exponent; `e = 2` as `x · x`",
     "a tensor exponent, including `scalar ** x`"},
    {"aten::relu", "`max(x, 0)`; NaN stays NaN", ""},
    {"aten::silu", "`x / (1 + exp(-x))`, in f32", ""},
    {"aten::sigmoid", "`1 / (1 + exp(-x))`, in f32", ""},
    {"aten::tanh", kUnary, ""},
    {"aten::gelu",
     "`0.5·x·(1 + erf(x/√2))`, or with `approximate='tanh'` `0.5·x·(1 + tanh(0.7978846·(x + 0.044715·x³)))`; "
     "gelu(+inf) is +inf (LibTorch's CPU kernel gives NaN there, its CUDA kernel +inf)",
     ""},
    {"aten::sum",
     "over a dim list (negative dims, keepdim; empty or none: every dim), or every dim; the input converted first to "
     "the result's dtype (a sum of bools counts in i64; the `dtype` argument)",
     ""},
    {"aten::mean", "as sum, divided by the number of elements reduced", ""},
    {"aten::amax", "the maximum over a dim list, keepdim; NaN propagates", ""},
    {"aten::softmax",
     "`exp(x - amax(x, d)) / sum(exp(x - amax(x, d)), d)` (one kernel after loop-fuse-rows), in f32 "
     "whatever `dtype` says (the result cast to it); a row of -inf only is NaN, as PyTorch",
     ""},
    {"aten::rms_norm",
     "`x · rsqrt(mean(x²) + eps) · w` over the trailing dims; weight optional; eps defaults to f32's epsilon, as "
     "PyTorch",
     ""},
    {"aten::linear", "`x @ Wᵀ + b` with W `[N, K]`, bias optional", "a weight that is not 2-D `[N, K]` with K x's last dim"},
    {"aten::matmul",
     "PyTorch's matmul: 1-D operands promoted and squeezed, batch dimensions broadcast; a constant right operand is "
     "stored k-contiguous (transposed, plus a permute)",
     kMatmulRefusal},
    {"aten::mm", "as matmul, 2-D", kMatmulRefusal},
    {"aten::bmm", "as matmul, batched", kMatmulRefusal},
    {"aten::transpose", "two dimensions swapped (negative dims), one IndexMap", ""},
    {"aten::t", "dimensions 0 and 1 swapped; the identity below rank 2", ""},
    {"aten::permute", "a constant permutation (negative dims), one IndexMap", ""},
    {"aten::view", kReshape, "a view to another number of elements"},
    {"aten::reshape", kReshape, ""},
    {"aten::flatten", kReshape, ""},
    {"aten::unsqueeze", kReshape, ""},
    {"aten::squeeze", "every size-1 dimension, or the listed ones of size 1; `dim=()` squeezes nothing, as PyTorch", ""},
    {"aten::expand", "a broadcast to LibTorch's result shape", ""},
    {"aten::expand_as", "a broadcast to the other tensor's shape", ""},
    {"aten::contiguous", kIdentity, ""},
    {"aten::clone", kIdentity, ""},
    {"aten::detach", kIdentity, ""},
    {"aten::to",
     "a cast to LibTorch's result dtype (any overload; device, non_blocking and copy ignored); float to i64 truncates, "
     "to bool is `!= 0`; to int32 computes i64 (every int32 value fits; an int32 model output is refused)",
     "a result dtype other than f32, f16, bf16, i64, int32 and bool; under --dtype, a `to` the trace pins to another floating "
     "type"},
    {"aten::type_as", "a cast to the other tensor's dtype", "as to"},
    {"aten::cos", kUnary, ""},
    {"aten::sin", kUnary, ""},
    {"aten::logical_not", "`x == 0`, bool result, any input dtype", ""},
    {"aten::bitwise_not", "on bool tensors: logical not", "integer operands (kiln has no integer bit operations)"},
    {"aten::lt", kCompare, ""},
    {"aten::le", kCompare, ""},
    {"aten::gt", kCompare, ""},
    {"aten::ge", kCompare, ""},
    {"aten::eq", kCompare, ""},
    {"aten::ne", kCompare, ""},
    {"aten::__and__", "on bool tensors: logical and", "integer operands (kiln has no integer bit operations)"},
    {"aten::logical_and", "`x != 0 and y != 0`, any dtypes, broadcasting; bool result", ""},
    {"aten::bitwise_and", "on bool tensors: logical and", "integer operands (kiln has no integer bit operations)"},
    {"aten::dropout", "the identity at inference (`train` false, or p = 0)",
     "`train` true with p > 0 (random; trace the model in eval mode)"},
    {"aten::alias", kIdentity, ""},
    {"aten::embedding",
     "a gather of the table's rows; ids clamped into the table (PyTorch fails on one out of range); padding_idx and "
     "scale_grad_by_freq do not change a forward",
     "a table that is not 2-D; `max_norm` (its in-place `embedding_renorm_`)"},
    {"aten::cat", "a concatenation along `dim` (negative dims); empty parts dropped, and parts of shape [0] skipped "
                 "whatever their rank (as LibTorch does)", "a concatenation of empty parts only"},
    {"aten::concat", "as cat", "as cat"},
    {"aten::stack", "each part given an axis of one at `dim`, then concatenated along it", "parts of different shapes"},
    {"aten::slice", "`start:end:step` along `dim` (None and negative starts wrapped and clamped), one IndexMap", ""},
    {"aten::select", "index i along `dim` (negative i wrapped): a slice of 1 and a reshape", ""},
    {"aten::masked_fill", "`where(mask, v, x)`; v a scalar or a 0-d tensor; broadcasting", ""},
    {"aten::where", "`where(c, x, y)`; x and y tensors or scalars, broadcasting", "the one-argument form (nonzero)"},
    {"aten::copy", "`src` broadcast to `self`'s shape and cast to its dtype (copy_ of the model's state, made functional)",
     "copy_ of anything but the model's state, or through a view of it"},
    {"aten::index_copy",
     "`self` with its slices `idx[t]` along `dim` replaced by `src`'s slice t (idx 1-D or 0-D), exact in every dtype; "
     "an index out of range writes nothing (PyTorch fails), a repeated one sums its sources",
     "an index of more than one dimension; a source of another shape than self's with `len(idx)` along dim"},
    {"aten::scaled_dot_product_attention",
     "`softmax(q kᵀ · scale + mask) v`: a bool mask as `where(m, 0, -inf)`, a float mask added, is_causal a lower "
     "triangle, scale `1/√E` by default, key/value heads shared by groups of query heads (GQA), q of lower rank "
     "broadcast; a row whose every key is masked gives 0, as PyTorch",
     "dropout_p other than 0; query heads that are not a multiple of the key/value heads"},
    {"aten::abs", kUnary, ""},
    {"aten::layer_norm",
     "`(x - mean) · rsqrt(mean((x - mean)²) + eps) · w + b` over the trailing dims (biased variance, eps 1e-5 by "
     "default), weight and bias optional",
     ""},
    {"aten::native_layer_norm", "as layer_norm, with its mean and rstd results where the model reads them", ""},
    {"aten::clamp", "`min(max(x, lo), hi)`; either bound None, a scalar or a tensor; NaN stays NaN (clamp_ as add_)", ""},
    {"aten::clip", "as clamp", ""},
    {"aten::clamp_min", "`max(x, lo)`", ""},
    {"aten::clamp_max", "`min(x, hi)`", ""},
    {"aten::addmm",
     "`beta · c + alpha · (a @ b)` (c not read when beta is 0; integer products take beta and alpha truncated, as "
     "PyTorch)",
     kMatmulRefusal},
    {"aten::baddbmm", "as addmm, batched", kMatmulRefusal},
    {"aten::index_select", "a gather along `dim` with a 1-D or 0-D index, clamped into range (PyTorch fails)",
     "an index of more than one dimension"},
    {"aten::index",
     "at import: `x[..., idx, ...]` with one integer index tensor (input data or a constant, any shape; the other "
     "places `:`) as `aten::index_select` of idx flattened, negative indices wrapped, and a reshape to "
     "`x.shape[:d] + idx.shape + x.shape[d+1:]` (Mixtral's `gate_up_proj[expert_ids]` reads only the chosen experts); "
     "a constant index stepping evenly as the `aten::slice` it equals",
     "several index tensors at once; a boolean mask (a result whose shape depends on the data)", true},
    {"aten::topk",
     "(values, indices) of the k largest (`largest=False`: smallest) along `dim`, in order, NaN counting as the largest "
     "as in PyTorch; k rounds of argmax's rule over the positions not yet taken; equal values first position first "
     "(PyTorch leaves their order unspecified, so indices of ties may differ from LibTorch's); `sorted=False` sorted too (PyTorch's order there is its own: a model using it only through gathers and sums, as routers do, computes the same)",
     "k of 0 or more than the dim's size; more than 2^24 positions"},
    {"aten::repeat_interleave",
     "each slice along `dim` repeated `repeats` times in place (x flattened first without a dim), one IndexMap",
     "repeats given as a tensor of counts per slice"},
    {"aten::max",
     "of every element; of two tensors elementwise (`torch.maximum`, NaN propagating); along `dim` (values, indices), "
     "the indices argmax's (the first maximum, NaN counting as it), keepdim",
     "more than 2^24 positions along dim"},
    {"aten::min", "as max, of the smallest", "as max"},
    {"aten::maximum", "elementwise maximum, broadcasting; NaN propagates", ""},
    {"aten::minimum", "elementwise minimum, broadcasting; NaN propagates", ""},
    {"aten::sort",
     "(values, indices) along `dim`, ascending or `descending`, stable (equal values keep their order; PyTorch's "
     "default order among them is unspecified), NaN last ascending and first descending; each position's rank "
     "counted against every other (O(n²) per row)",
     "more than 4096 positions along dim"},
    {"aten::cumsum", "inclusive prefix sums along `dim`, in the result's dtype (`dtype`; integers and bools in i64)",
     "more than 4096 positions along dim"},
    {"aten::histc",
     "counts of the elements in `bins` equal bins over [min, max] (max in the last bin, the rest and NaN not counted; "
     "min = max = 0: the data's range; an empty range widened by 1)",
     "min > max; more than 2^26 elements times bins"},
    {"aten::floor_divide",
     "`floor(a / b)` of integer tensors, b a tensor or a nonzero integer (a zero divisor tensor gives an unspecified "
     "value, where PyTorch raises)",
     "floating operands (write torch.floor(a / b))"},
    {"aten::_grouped_mm",
     "`input [S, K] x weight [E, K, N]` with offsets `[E]`: row r by the weight of the group it falls in "
     "(`offs[e-1] <= r < offs[e]`), that weight gathered per row so a row reads only its group's (transformers' "
     "grouped_mm experts); rows past the last offset by the last group (PyTorch leaves them unwritten)",
     "other operand ranks; bias and out_dtype"},
    {"aten::index_put",
     "`x[idx] = v` with one integer index tensor for dim 0, v broadcast; `accumulate` adds (index_put_ on a fresh "
     "result likewise); negative indices wrapped, others out of range write nothing; a repeated index sums its values",
     "several index tensors, None in the list, a boolean mask"},
    {"aten::gather",
     "`out[p] = x[p with p_dim = index[p]]` (index of x's rank), a row gather from x flattened at each element's "
     "linear position; negative indices wrapped, others clamped into range (PyTorch fails)",
     "an index larger than x in another dim; x of more than 2^24 elements"},
    {"aten::scatter",
     "x with `x[p with p_dim = index[p]]` replaced by a value or `src[p]` (scatter_ on a fresh result likewise); "
     "several landing on one position: their sum (PyTorch leaves it undefined)",
     "an index larger than x in the other dims (or than src); the `reduce` argument (use scatter_reduce)"},
    {"aten::slice_scatter",
     "x with its slice `start:end:step` along `dim` replaced by src (cast to x's dtype); what the import makes of an "
     "in-place write through slices of a fresh tensor (`k = x.new_empty(...); k[..., :n] = a`)",
     "an in-place write into a tensor whose earlier view is read after it"},
    {"aten::select_scatter", "x with its slice `index` along `dim` replaced by src, as slice_scatter", ""},
    {"aten::view_as_complex",
     "at import: on input data, the real tensor `[.., 2]` itself, as (re, im) pairs; a product of such values with each "
     "other, a complex constant or a real value is computed on the pairs (DeepSeek-V2's complex rotary)",
     "any other op on a complex value", true},
    {"aten::view_as_real", "at import: a complex value's (re, im) pairs, see view_as_complex", "", true},
    {"aten::split", kSplit, kSplitRefusal, true},
    {"aten::split_with_sizes", kSplit, kSplitRefusal, true},
    {"aten::unsafe_split", kSplit, kSplitRefusal, true},
    {"aten::chunk", kSplit, kSplitRefusal, true},
    {"aten::unsafe_chunk", kSplit, kSplitRefusal, true},
    {"aten::unbind", "at import: one `aten::select` per element", "", true},
    {"aten::new_ones", kConstantOfShape, kConstantRefusal, true},
    {"aten::new_zeros", kConstantOfShape, kConstantRefusal, true},
    {"aten::new_full", kConstantOfShape, kConstantRefusal, true},
    {"aten::zeros_like", kConstantOfShape, kConstantRefusal, true},
    {"aten::ones_like", kConstantOfShape, kConstantRefusal, true},
    {"aten::full_like", kConstantOfShape, kConstantRefusal, true},
    {"aten::new_empty",
     "at import: as new_zeros (PyTorch leaves it uninitialized; a model writes it before reading it, e.g. through "
     "slices, see slice_scatter)",
     kConstantRefusal, true},
    {"aten::empty_like", "at import: as zeros_like (PyTorch leaves it uninitialized)", kConstantRefusal, true},
};

}  // namespace

const std::vector<OpEntry>& opCatalog() {
  static const std::vector<OpEntry> ops(std::begin(kOps), std::end(kOps));
  return ops;
}

std::string opsMarkdown() {
  std::string text =
      "<!-- BEGIN kiln ops --markdown: generated from src/tensor/op_catalog.cpp; edit there and paste the output -->\n";
  for (const OpEntry& op : opCatalog()) {
    text += fmt::format("- `{}`: {}", op.name, op.computes);
    if (*op.refuses) text += fmt::format(". **Refused:** {}", op.refuses);
    text += ".\n";
  }
  return text + "<!-- END kiln ops --markdown -->\n";
}

}  // namespace kiln::tensor
