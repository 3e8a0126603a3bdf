// Facts about attention kernels (Kernel::attention, an OnlineSoftmax) that the Loop pass forming them and the Tile
// schedule running them share: which loads are q, k and v, and which keys a mask leaves each query row.
#pragma once
#include <optional>
#include <string>

#include "kiln/loop/ir.h"

namespace kiln::loop {

// The operands of an attention kernel that a flash schedule can run (on tensor cores for bf16/f16, on CUDA cores for
// f32): q and k the two factors of the dot, v the value, each a plain load (under casts to f32) of a buffer of one type
// (bf16, f16 or f32), reading no indices from memory; one depth axis d; d (in q and k) and e (in v) contiguous in memory
// in runs of 8 elements that start at multiples of 8 (16-byte copies); depth and value widths multiples of 16 up to
// 256; a query axis: the innermost row
// axis read by q and by neither k nor v (k and v are shared by a block's query rows; with one k/v head the heads axis is
// such an axis too, the sequence is innermost).
struct AttentionOperands {
  const Expr* q = nullptr;
  const Expr* k = nullptr;
  const Expr* v = nullptr;
  DType type = DType::BF16;
  int queryAxis = -1;  // position in Kernel::parallel
  int64_t depth = 0;   // D
  int64_t width = 0;   // E, the value's (and output's last axis') extent
};
// `why`, when given, receives the reason for nullopt (one phrase, for --explain-fusion).
std::optional<AttentionOperands> flashAttentionOperands(const Program& p, const Kernel& k, std::string* why = nullptr);
constexpr int64_t kAttentionMaxWidth = 256;
// Whether the attention kernel's k and v (flashAttentionOperands) read the same elements for `rows` consecutive values
// of parallel axis `axis` starting at every multiple of `rows`: query heads sharing a KV head (grouped-query attention
// reads k and v at head div group), for rows dividing the group.
bool sharedAcrossRows(const Program& p, const Kernel& k, int axis, int64_t rows);

// The keys a mask in the score leaves query row i (the query axis' variable): j in [i + from, i + to). Found where the
// score is the masked value's sum with other terms, the mask a select on j < i + c whose other side is an immediate of at
// most kMaskedScore (exp of it minus any finite maximum is 0): causal masks (to = 1 + keys - queries), sliding windows
// (from). Only when every query row keeps at least one key (otherwise softmax over the masked values is not zero).
struct KeyBounds {
  std::optional<int64_t> from, to;
};
KeyBounds keyBounds(const Kernel& k, int queryAxis);
// The keys a mask read at run time leaves the rows: j < limit, limit an index expression over the kernel's row variables
// that reads memory (a decoder step's causal mask compares the keys with the positions the forward was given:
// loop-index-comparisons). Found where the score is a sum with terms select(j < limit, x, masked) or
// where(select(j < limit, 1, 0), x, masked) (masked an immediate of at most kMaskedScore), several combined by their
// minimum; nullopt when there is none. The selects stay in the score
// (unmaskedScore keeps them): the limit only tells a schedule which keys it need not read at all.
std::optional<Idx> runtimeKeyLimit(const Kernel& k);
// The score where the mask keeps the key: keyBounds' selects replaced by their kept side (what the score is for every
// key inside the bounds).
ExprP unmaskedScore(const Kernel& k, int queryAxis);
constexpr float kMaskedScore = -1e30f;

}  // namespace kiln::loop
