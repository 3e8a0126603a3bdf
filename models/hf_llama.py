"""transformers' LlamaForCausalLM (random weights, sdpa attention, no KV cache) traced on input_ids -> logits.

The model is built from a LlamaConfig (nothing is downloaded), its parameters are
overwritten in place with seeded normals (norm weights ~1 +- 0.1, matrices
N(0, 1/fan_in)), and it is traced through a wrapper whose forward(input_ids) returns
`model(input_ids=input_ids, use_cache=False).logits`, so the trace returns one tensor.
Unlike models/llama.py the trace keeps HF's dynamic-shape plumbing (aten::size, prim::NumToTensor,
aten::Int) and builds position ids and a boolean causal mask inside the graph.

    python3 models/hf_llama.py                                   # tiny f32 -> models/fixtures/hf_llama_tiny.pt
    python3 models/hf_llama.py --preset tinyllama --dtype bf16 -o /tmp/tinyllama_bf16.pt   # 1.1B, never in fixtures
"""
import argparse
import contextlib
import pathlib
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402
from llama import DTYPES, check  # noqa: E402

NAME = "hf_llama_tiny"

PRESETS = {
    "tiny": dict(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=256,
                 max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0),
    # TinyLlama-1.1B shapes (random weights; ~4.4 GB in f32 -- never written to fixtures/).
    "tinyllama": dict(hidden=2048, intermediate=5632, layers=22, heads=32, kv_heads=4, vocab=32000,
                      max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0),
}


class LogitsOnly(nn.Module):
    """forward(input_ids) -> logits tensor (not a ModelOutput)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def _no_init_weights():
    """Skip transformers' (slow, ~12 s for 1.1B params on 2 cores) default init; we overwrite every weight."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # older transformers
        try:
            from transformers.modeling_utils import no_init_weights
        except ImportError:
            return contextlib.nullcontext()
    return no_init_weights()


def randomize_inplace_(module, seed=0):
    """Seeded in-place init (same distribution as kiln_export.randomize_, no temporaries)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():  # tied weights are listed once
            if p.dim() == 1:
                p.normal_(1.0, 0.1, generator=g)
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5, generator=g)
    return module


def build(preset="tiny", dtype="f32", tied=False, seed=0, **overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    p = dict(PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None})
    config = LlamaConfig(
        vocab_size=p["vocab"],
        hidden_size=p["hidden"],
        intermediate_size=p["intermediate"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        num_key_value_heads=p["kv_heads"],
        max_position_embeddings=p["max_position_embeddings"],
        rms_norm_eps=p["rms_norm_eps"],
        rope_theta=p["rope_theta"],
        tie_word_embeddings=tied,
        use_cache=False,
        attn_implementation="sdpa",
    )
    torch.manual_seed(seed)
    with _no_init_weights():
        model = LlamaForCausalLM(config)
    if tied:
        model.tie_weights()
        assert model.lm_head.weight is model.model.embed_tokens.weight
    randomize_inplace_(model, seed=seed)
    model = model.to(DTYPES[dtype]).eval()
    return LogitsOnly(model).eval()


def example_inputs(vocab, batch=1, seq=16, seed=0):
    g = torch.Generator().manual_seed(seed + 1)
    return {"input_ids": torch.randint(0, vocab, (batch, seq), generator=g, dtype=torch.int64)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    # Each of these overrides the preset's value when given.
    p.add_argument("--hidden", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--intermediate", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    p.add_argument("--tied", action="store_true", help="tie lm_head.weight to embed_tokens.weight")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-check", action="store_true", help="skip reloading the .pt and comparing with eager")
    p.add_argument("--device", default="cpu",
                   help="trace on this device (cuda for checks on a GPU: transformers' traces pin the device "
                        "their masks are built on, so the trace only runs where it was made)")
    p.add_argument("-o", "--output", type=pathlib.Path, default=None,
                   help=f"default: models/fixtures/{NAME}.pt (tiny preset only; required otherwise)")
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args([] if argv is None and __name__ != "__main__" else argv)
    fixtures = pathlib.Path(__file__).resolve().parent / "fixtures"
    if a.output is None:
        if a.preset != "tiny":
            sys.exit(f"--preset {a.preset} needs -o PATH (large models are not written to {fixtures})")
        a.output = fixtures / f"{NAME}.pt"
    elif a.preset != "tiny" and a.output.resolve().parent == fixtures:
        sys.exit(f"refusing to write --preset {a.preset} into {fixtures}")
    t0 = time.time()
    model = build(a.preset, a.dtype, a.tied, a.seed, hidden=a.hidden, layers=a.layers, heads=a.heads,
                  kv_heads=a.kv_heads, intermediate=a.intermediate, vocab=a.vocab)
    model = model.to(a.device)
    t1 = time.time()
    inputs = example_inputs(model.model.config.vocab_size, a.batch, a.seq, a.seed)
    inputs = {k: v.to(a.device) for k, v in inputs.items()}
    path = export(model, inputs, a.output)
    t2 = time.time()
    print(f"build {t1 - t0:.1f}s, trace+save {t2 - t1:.1f}s")
    if not a.no_check:
        check(path, model, inputs)
    return path


if __name__ == "__main__":
    main()
