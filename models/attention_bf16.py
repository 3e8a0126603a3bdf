"""bf16 attention two ways, q [1,8,100,64], k and v [1,2,100,64] (grouped-query, 4 query heads per key head):
sdpa with is_causal, and the eager chain with a sliding-window mask (40 keys) kept as a constant buffer, the way
Hugging Face's eager path adds a prepared mask. 100 tokens: not a multiple of the flash schedule's 64-key steps.
Also attention_bf16_long.pt: causal sdpa over 200 tokens, head dim 16 (enough key steps for deeper copy rings);
attention_bf16_deep.pt: causal sdpa over 80 tokens at head dim 128 (2 query heads on 1 key/value head: warps of two row
groups load q's fragments at every step); attention_bf16_512.pt: causal sdpa over 512 tokens, 8 query heads on 2, head
dim 16 (keys in 4 steps of 128; blocks of one warpgroup, as tile-attention-scores-by-wgmma needs); and attention_f32.pt: the two attentions of
attention_bf16.pt in f32 (the flash schedule on CUDA cores)."""
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402

NAME = "attention_bf16"
LENGTH, WINDOW, HEADS, KV_HEADS, HEAD_DIM = 100, 40, 8, 2, 64


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        i = torch.arange(LENGTH)[:, None]
        j = torch.arange(LENGTH)[None, :]
        keep = (j <= i) & (j > i - WINDOW)
        mask = torch.zeros(LENGTH, LENGTH).masked_fill(~keep, torch.finfo(torch.float32).min)
        self.register_buffer("window_mask", mask)

    def forward(self, q, k, v):
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        group = HEADS // KV_HEADS
        kk = k[:, :, None].expand(1, KV_HEADS, group, LENGTH, HEAD_DIM).reshape(1, HEADS, LENGTH, HEAD_DIM)
        vv = v[:, :, None].expand(1, KV_HEADS, group, LENGTH, HEAD_DIM).reshape(1, HEADS, LENGTH, HEAD_DIM)
        scores = torch.matmul(q, kk.transpose(-2, -1)) * HEAD_DIM ** -0.5 + self.window_mask
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        return causal, torch.matmul(probs, vv)


class LongCausal(nn.Module):
    """Causal grouped-query sdpa (attention_bf16_long: 200 tokens, 4 steps of 64 keys, the last partial, 4 query heads on
    1 key/value head of 16; the same module at the shapes of attention_bf16_deep and attention_bf16_512)."""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def main():
    torch.manual_seed(0)
    inputs = {
        "q": torch.randn(1, HEADS, LENGTH, HEAD_DIM).bfloat16(),
        "k": torch.randn(1, KV_HEADS, LENGTH, HEAD_DIM).bfloat16(),
        "v": torch.randn(1, KV_HEADS, LENGTH, HEAD_DIM).bfloat16(),
    }
    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    export(Attention(), inputs, fixtures / f"{NAME}.pt")
    long_inputs = {
        "q": torch.randn(1, 4, 200, 16).bfloat16(),
        "k": torch.randn(1, 1, 200, 16).bfloat16(),
        "v": torch.randn(1, 1, 200, 16).bfloat16(),
    }
    export(LongCausal(), long_inputs, fixtures / f"{NAME}_long.pt")
    for suffix, heads, kv_heads, length, dim in (("deep", 2, 1, 80, 128), ("512", 8, 2, 512, 16)):
        shaped = {
            "q": torch.randn(1, heads, length, dim).bfloat16(),
            "k": torch.randn(1, kv_heads, length, dim).bfloat16(),
            "v": torch.randn(1, kv_heads, length, dim).bfloat16(),
        }
        export(LongCausal(), shaped, fixtures / f"{NAME}_{suffix}.pt")
    return export_f32(fixtures)


def export_f32(fixtures):
    torch.manual_seed(1)
    inputs = {
        "q": torch.randn(1, HEADS, LENGTH, HEAD_DIM),
        "k": torch.randn(1, KV_HEADS, LENGTH, HEAD_DIM),
        "v": torch.randn(1, KV_HEADS, LENGTH, HEAD_DIM),
    }
    return export(Attention(), inputs, fixtures / "attention_f32.pt")


if __name__ == "__main__":
    main()
