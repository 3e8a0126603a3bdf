"""kiln's own Llama (decoder-only LM) in plain PyTorch; input_ids [batch, seq] int64 -> logits.

Token embedding, N decoder layers (RMSNorm -> GQA attention with rotary embeddings and
causal SDPA -> residual, RMSNorm -> SwiGLU MLP -> residual), final RMSNorm, LM head
(tied to the embedding with --tied, untied by default).

The model is built for one (batch, seq): every view/reshape/expand uses literal sizes and
the rotary cos/sin tables are precomputed buffers [seq, head_dim] for positions 0..seq-1,
so the trace has no aten::size / prim::NumToTensor / aten::Int.

    python3 models/llama.py                         # tiny f32 -> models/fixtures/llama_tiny.pt
    python3 models/llama.py --dtype bf16 --tied -o /tmp/llama_bf16.pt
"""
import argparse
import dataclasses
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export, randomize_  # noqa: E402

NAME = "llama_tiny"

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


@dataclasses.dataclass
class LlamaConfig:
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 128
    vocab: int = 256
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tied: bool = False

    @property
    def head_dim(self):
        return self.hidden // self.heads


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x


def rotate_half(x, half):
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, batch, seq):
        super().__init__()
        self.cfg, self.batch, self.seq = cfg, batch, seq
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.heads * hd, cfg.hidden, bias=False)

    def forward(self, x, cos, sin):
        c, b, s = self.cfg, self.batch, self.seq
        hd, rep = c.head_dim, c.heads // c.kv_heads
        q = self.q_proj(x).view(b, s, c.heads, hd).transpose(1, 2)     # [b, H, s, hd]
        k = self.k_proj(x).view(b, s, c.kv_heads, hd).transpose(1, 2)  # [b, KV, s, hd]
        v = self.v_proj(x).view(b, s, c.kv_heads, hd).transpose(1, 2)
        q = q * cos + rotate_half(q, hd // 2) * sin                     # cos/sin [s, hd] broadcast
        k = k * cos + rotate_half(k, hd // 2) * sin
        if rep > 1:                                                     # GQA: repeat kv heads
            k = k.unsqueeze(2).expand(b, c.kv_heads, rep, s, hd).reshape(b, c.heads, s, hd)
            v = v.unsqueeze(2).expand(b, c.kv_heads, rep, s, hd).reshape(b, c.heads, s, hd)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [b, H, s, hd]
        out = out.transpose(1, 2).reshape(b, s, c.heads * hd)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, batch, seq):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, batch, seq)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, cfg, batch=1, seq=16):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg, batch, seq) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied:
            self.lm_head.weight = self.embed_tokens.weight
        # Rotary tables for positions 0..seq-1 (computed in f32; .to(dtype) casts them).
        hd = cfg.head_dim
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)  # [seq, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)                                 # [seq, hd]
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.lm_head(self.norm(x))


def check(path, model, inputs):
    """Reload `path` with torch.jit.load and print max |traced - eager| on `inputs`."""
    loaded = torch.jit.load(str(path))
    with torch.no_grad():
        ref = model(*inputs.values())
        out = loaded(*inputs.values())
    diff = (out.float() - ref.float()).abs().max().item()
    print(f"check {path}: output {tuple(out.shape)} {out.dtype}, max abs diff vs eager {diff:.3g}")
    return diff


def build(cfg, batch=1, seq=16, dtype="f32", seed=0):
    torch.manual_seed(seed)
    model = randomize_(Llama(cfg, batch, seq), seed=seed)
    return model.to(DTYPES[dtype]).eval()


def example_inputs(cfg, batch=1, seq=16, seed=0):
    g = torch.Generator().manual_seed(seed + 1)
    return {"input_ids": torch.randint(0, cfg.vocab, (batch, seq), generator=g, dtype=torch.int64)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    p.add_argument("--tied", action="store_true", help="tie lm_head.weight to embed_tokens.weight")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-check", action="store_true", help="skip reloading the .pt and comparing with eager")
    p.add_argument("-o", "--output", type=pathlib.Path,
                   default=pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args([] if argv is None and __name__ != "__main__" else argv)
    cfg = LlamaConfig(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                      intermediate=a.intermediate, vocab=a.vocab, tied=a.tied)
    assert cfg.hidden % cfg.heads == 0 and cfg.heads % cfg.kv_heads == 0
    model = build(cfg, a.batch, a.seq, a.dtype, a.seed)
    inputs = example_inputs(cfg, a.batch, a.seq, a.seed)
    path = export(model, inputs, a.output)
    if not a.no_check:
        check(path, model, inputs)
    return path


if __name__ == "__main__":
    main()
