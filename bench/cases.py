"""The kernel-suite cases: 14 sublayer kinds x 2 model shapes x 3 sequence lengths = 84, each in f32 and bf16.

The kinds: q, k, v, o, gate, up and down projections (nn.Linear; Qwen's q/k/v have a bias), o projection +
residual add, RMSNorm, softmax over [1, heads, S, S], silu(gate)*up, causal GQA sdpa, the naive attention chain
and silu(gate)*up then the down projection. k_proj and v_proj have one shape (hidden -> kv_heads*head_dim)
and different weights: they are the two "kv projection" cases of the 14 kinds x 2 models x 3 seqs = 84.

A case is a tiny nn.Module with literal shapes (so its trace has no aten::size) plus the analytic counts the
floor needs. Batch is 1 throughout.

    from cases import CASES, DTYPES
    case = CASES[0]                          # tinyllama/q_proj/s32
    module, inputs = case.build("bf16")      # seeded random weights, seeded example inputs (dict name -> tensor)
    case.flops, case.bytes("bf16"), case.floor_s("bf16")

Counts (used only for the floor, a lower bound on the time any implementation can take):
- flops: 2 per multiply-add of every matrix product; for causal attention only the half of q·kᵀ and p·v that
  the mask keeps (S·(S+1)/2 of the S² pairs), since that is all a kernel has to compute. Elementwise work
  counts one flop per arithmetic op per element (it never decides the floor on this machine).
- bytes: every input and every weight read once and every output written once, in the case's dtype
  (the naive attention chain's additive mask included); intermediates are assumed never to leave the chip.
- floor = max(bytes / 4.2e12 B/s, flops / peak), peak 767e12 (bf16) or 50e12 (f32, TF32 off): the measured
  H200 ceilings of ../../shared/REFERENCE.md.
"""
import dataclasses
import math
import pathlib
import sys
from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "models"))
from kiln_export import randomize_  # noqa: E402
from llama import RMSNorm  # noqa: E402  (Llama's RMSNorm written out: pow, mean, add eps, rsqrt, mul)

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
ELEMENT_BYTES = {"f32": 4, "bf16": 2}
BANDWIDTH = 4.2e12                       # B/s, measured device-to-device copy (bytes read + written)
PEAK_FLOPS = {"bf16": 767e12, "f32": 50e12}
SEQS = (32, 128, 512)


@dataclasses.dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool
    rms_eps: float

    @property
    def q_dim(self):
        return self.heads * self.head_dim

    @property
    def kv_dim(self):
        return self.kv_heads * self.head_dim


MODELS = (
    ModelShape("tinyllama", hidden=2048, intermediate=5632, heads=32, kv_heads=4, head_dim=64,
               qkv_bias=False, rms_eps=1e-5),
    ModelShape("qwen2.5-7b", hidden=3584, intermediate=18944, heads=28, kv_heads=4, head_dim=128,
               qkv_bias=True, rms_eps=1e-6),
)


# ---------------------------------------------------------------------------------------------- modules

class Projection(nn.Module):
    """One nn.Linear: x [1, S, in] -> [1, S, out]."""

    def __init__(self, d_in, d_out, bias):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out, bias=bias)

    def forward(self, x):
        return self.proj(x)


class ProjectionResidual(nn.Module):
    """o_proj(x) + residual."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.o_proj = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x, residual):
        return self.o_proj(x) + residual




class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class SiluMul(nn.Module):
    def forward(self, gate, up):
        return F.silu(gate) * up


class SiluMulDown(nn.Module):
    """down_proj(silu(gate) * up): the second half of a SwiGLU MLP."""

    def __init__(self, intermediate, hidden):
        super().__init__()
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, gate, up):
        return self.down_proj(F.silu(gate) * up)


def repeat_kv(x, heads, kv_heads, seq, head_dim):
    """[1, KV, S, D] -> [1, H, S, D] by expand + reshape, as transformers' repeat_kv."""
    rep = heads // kv_heads
    return x.unsqueeze(2).expand(1, kv_heads, rep, seq, head_dim).reshape(1, heads, seq, head_dim)


class CausalSDPA(nn.Module):
    """Causal grouped-query attention through F.scaled_dot_product_attention.

    gqa="flag" passes enable_gqa=True with k, v of kv_heads heads; gqa="expand" repeats k and v to all heads
    first (expand + reshape, as transformers does), for compilers that do not take the flag.
    """

    def __init__(self, heads, kv_heads, seq, head_dim, gqa):
        super().__init__()
        self.heads, self.kv_heads, self.seq, self.head_dim, self.gqa = heads, kv_heads, seq, head_dim, gqa

    def forward(self, q, k, v):
        if self.gqa == "flag":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        k = repeat_kv(k, self.heads, self.kv_heads, self.seq, self.head_dim)
        v = repeat_kv(v, self.heads, self.kv_heads, self.seq, self.head_dim)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class NaiveAttention(nn.Module):
    """The attention chain written out: q·kᵀ, scale, add a causal mask (0 / -inf buffer), softmax, ·v (GQA by
    expand + reshape of k and v)."""

    def __init__(self, heads, kv_heads, seq, head_dim):
        super().__init__()
        self.heads, self.kv_heads, self.seq, self.head_dim = heads, kv_heads, seq, head_dim
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        k = repeat_kv(k, self.heads, self.kv_heads, self.seq, self.head_dim)
        v = repeat_kv(v, self.heads, self.kv_heads, self.seq, self.head_dim)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        probs = torch.softmax(scores + self.mask, dim=-1)
        return torch.matmul(probs, v)


# ------------------------------------------------------------------------------------------------ cases

@dataclasses.dataclass(frozen=True)
class Case:
    name: str                                   # e.g. "tinyllama/q_proj/s128"
    model: str
    kind: str
    seq: int
    make_module: Callable[[], nn.Module]        # f32 module, parameters not yet randomised
    input_shapes: Dict[str, Tuple[int, ...]]    # forward's inputs, in order
    output_shapes: Tuple[Tuple[int, ...], ...]
    weight_elements: int                        # parameters + buffers (read once)
    flops: float

    @property
    def file_stem(self):
        return self.name.replace("/", "__")

    @property
    def seed(self):
        return sum(ord(c) * 31 ** i for i, c in enumerate(self.name)) % (2 ** 31)

    def elements(self):
        ins = sum(math.prod(s) for s in self.input_shapes.values())
        outs = sum(math.prod(s) for s in self.output_shapes)
        return ins + outs + self.weight_elements

    def bytes(self, dtype):
        return self.elements() * ELEMENT_BYTES[dtype]

    def floor_s(self, dtype):
        return max(self.bytes(dtype) / BANDWIDTH, self.flops / PEAK_FLOPS[dtype])

    def hbm_floor_s(self, dtype):
        """bytes / HBM bandwidth: the floor of a memory-bound case."""
        return self.bytes(dtype) / BANDWIDTH

    def floor_bound(self, dtype):
        """'memory' or 'compute': which term sets the floor."""
        return "memory" if self.bytes(dtype) / BANDWIDTH >= self.flops / PEAK_FLOPS[dtype] else "compute"

    def build_module(self, dtype, device="cpu"):
        """The module with seeded random parameters (never zeros), in `dtype` on `device`, in eval mode."""
        torch.manual_seed(self.seed)
        module = randomize_(self.make_module(), seed=self.seed)
        return module.to(device=device, dtype=DTYPES[dtype]).eval()

    def make_inputs(self, dtype, device="cpu", seed=None):
        """One set of random inputs (dict name -> tensor); seed None -> the case's example inputs."""
        g = torch.Generator().manual_seed(self.seed + 1 if seed is None else seed)
        return {name: torch.randn(shape, generator=g).to(device=device, dtype=DTYPES[dtype])
                for name, shape in self.input_shapes.items()}

    def build(self, dtype, device="cpu"):
        return self.build_module(dtype, device), self.make_inputs(dtype, device)


def _linear_flops(seq, d_in, d_out):
    return 2.0 * seq * d_in * d_out


def _causal_attention_flops(heads, seq, head_dim):
    """q·kᵀ and p·v over the S(S+1)/2 pairs the causal mask keeps, plus ~5 flops per kept score (scale,
    max, exp, sum, divide)."""
    pairs = heads * seq * (seq + 1) / 2
    return 4.0 * pairs * head_dim + 5.0 * pairs


def cases_for(m: ModelShape, seq: int, sdpa_gqa: str = "flag"):
    """The 14 cases of one model shape at one sequence length."""
    H, KV, D, h, inter = m.heads, m.kv_heads, m.head_dim, m.hidden, m.intermediate
    x = (1, seq, h)
    qkv_bias = m.qkv_bias

    def lin(d_in, d_out, bias):
        return d_in * d_out + (d_out if bias else 0)

    specs = [
        # kind, module factory, inputs, outputs, weight elements, flops
        ("q_proj", lambda: Projection(h, m.q_dim, qkv_bias), {"x": x}, [(1, seq, m.q_dim)],
         lin(h, m.q_dim, qkv_bias), _linear_flops(seq, h, m.q_dim)),
        ("k_proj", lambda: Projection(h, m.kv_dim, qkv_bias), {"x": x}, [(1, seq, m.kv_dim)],
         lin(h, m.kv_dim, qkv_bias), _linear_flops(seq, h, m.kv_dim)),
        ("v_proj", lambda: Projection(h, m.kv_dim, qkv_bias), {"x": x}, [(1, seq, m.kv_dim)],
         lin(h, m.kv_dim, qkv_bias), _linear_flops(seq, h, m.kv_dim)),
        ("o_proj", lambda: Projection(m.q_dim, h, False), {"x": (1, seq, m.q_dim)}, [x],
         lin(m.q_dim, h, False), _linear_flops(seq, m.q_dim, h)),
        ("gate_proj", lambda: Projection(h, inter, False), {"x": x}, [(1, seq, inter)],
         lin(h, inter, False), _linear_flops(seq, h, inter)),
        ("up_proj", lambda: Projection(h, inter, False), {"x": x}, [(1, seq, inter)],
         lin(h, inter, False), _linear_flops(seq, h, inter)),
        ("down_proj", lambda: Projection(inter, h, False), {"x": (1, seq, inter)}, [x],
         lin(inter, h, False), _linear_flops(seq, inter, h)),
        ("o_proj_residual", lambda: ProjectionResidual(m.q_dim, h), {"x": (1, seq, m.q_dim), "residual": x}, [x],
         lin(m.q_dim, h, False), _linear_flops(seq, m.q_dim, h) + seq * h),
        ("rmsnorm", lambda: RMSNorm(h, m.rms_eps), {"x": x}, [x], h, 6.0 * seq * h),
        ("softmax", Softmax, {"x": (1, H, seq, seq)}, [(1, H, seq, seq)], 0, 5.0 * H * seq * seq),
        ("silu_mul", SiluMul, {"gate": (1, seq, inter), "up": (1, seq, inter)}, [(1, seq, inter)], 0,
         5.0 * seq * inter),
        ("sdpa_causal_gqa", lambda: CausalSDPA(H, KV, seq, D, sdpa_gqa),
         {"q": (1, H, seq, D), "k": (1, KV, seq, D), "v": (1, KV, seq, D)}, [(1, H, seq, D)], 0,
         _causal_attention_flops(H, seq, D)),
        ("attention_naive", lambda: NaiveAttention(H, KV, seq, D),
         {"q": (1, H, seq, D), "k": (1, KV, seq, D), "v": (1, KV, seq, D)}, [(1, H, seq, D)], seq * seq,
         _causal_attention_flops(H, seq, D)),
        ("silu_mul_down", lambda: SiluMulDown(inter, h), {"gate": (1, seq, inter), "up": (1, seq, inter)}, [x],
         lin(inter, h, False), _linear_flops(seq, inter, h) + 5.0 * seq * inter),
    ]
    out = []
    for kind, factory, inputs, outputs, weights, flops in specs:
        out.append(Case(name=f"{m.name}/{kind}/s{seq}", model=m.name, kind=kind, seq=seq, make_module=factory,
                        input_shapes=dict(inputs), output_shapes=tuple(outputs), weight_elements=weights,
                        flops=float(flops)))
    return out


KINDS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "o_proj_residual", "rmsnorm",
         "softmax", "silu_mul", "sdpa_causal_gqa", "attention_naive", "silu_mul_down")


def all_cases(sdpa_gqa="flag"):
    return [c for m in MODELS for s in SEQS for c in cases_for(m, s, sdpa_gqa)]


CASES = all_cases()


MEMORY_BOUND_KINDS = ("rmsnorm", "softmax", "silu_mul")   # no matrix product: bound by HBM bandwidth


def _names(case, term):
    """Whether `term` ("silu_mul", "s32", "tinyllama/q_proj", a whole name) is a run of case.name's '/' parts."""
    parts, want = case.name.split("/"), term.split("/")
    return any(parts[i:i + len(want)] == want for i in range(len(parts) - len(want) + 1))


def select(cases=None, filter_substring=None):
    """The cases matching any comma-separated term of `filter_substring`. A term that names a model, kind or
    seq (or a run of them: "tinyllama/q_proj", a whole case name) matches exactly, so "silu_mul" is not
    "silu_mul_down"; a term that names none of them is matched as a substring ("qwen", "proj")."""
    cases = CASES if cases is None else cases
    if not filter_substring:
        return list(cases)
    chosen = set()
    for term in (t.strip() for t in filter_substring.split(",") if t.strip()):
        exact = {c.name for c in cases if _names(c, term)}
        chosen |= exact or {c.name for c in cases if term in c.name}
    return [c for c in cases if c.name in chosen]


def dtypes_for(arg):
    return list(DTYPES) if arg == "all" else [arg]


if __name__ == "__main__":
    print(f"{len(CASES)} cases x {len(DTYPES)} dtypes")
    print(f"{'case':36} {'MFLOP':>10} {'MB f32':>9} {'floor f32 us':>12} {'floor bf16 us':>13} bound(bf16)")
    for c in CASES:
        print(f"{c.name:36} {c.flops / 1e6:10.1f} {c.bytes('f32') / 1e6:9.2f} {c.floor_s('f32') * 1e6:12.2f} "
              f"{c.floor_s('bf16') * 1e6:13.2f} {c.floor_bound('bf16')}")
