"""Decoder-step traces with a static KV cache, the input of `kiln generate` (docs/decode.md).

A tiny random-weight transformers model (hf_families.py's configs, or hf_llama.py's Llama) is wrapped in
transformers.integrations.executorch.TorchExportableModuleWithStaticCache and traced with a plain torch.jit.trace
through forward(ids, pos) -> logits, at T tokens (ids [1, T], pos [T], recorded in kiln_inputs.json). The trace keeps the cache as module buffers
(key_cache_i, value_cache_i, cumulative_length_i) written in place; kiln makes them the model's state.

    python3 models/hf_decode.py                           # llama -> models/fixtures/hf_llama_decode_tiny.pt
    python3 models/hf_decode.py qwen2 -o /tmp/qwen2_step.pt --cache 64 --dtype bf16
    python3 models/hf_decode.py llama --generate 5,17,42 --new 16   # print model.generate's ids, trace nothing
    python3 models/hf_decode.py llama --preset tinyllama --dtype bf16 --cache 2048 -o /tmp/tinyllama_step.pt
    python3 models/hf_decode.py llama --hidden 256 --heads 16 --kv-heads 2 --dtype bf16 -o /tmp/step16.pt
"""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import hf_families  # noqa: E402
import hf_llama  # noqa: E402
from kiln_export import inputs_json  # noqa: E402
from llama import DTYPES  # noqa: E402

FAMILIES = ["llama", "qwen2", "phi3", "gemma", "gemma2", "mistral", "qwen3"]
# hf_llama.py's preset sizes a trace may replace (--hidden 256 --heads 16 ...).
SHAPE_OPTIONS = ["hidden", "intermediate", "layers", "heads", "kv_heads", "vocab"]
# Families whose sliding-window layers transformers exports with TorchExportableModuleWithHybridCache.
HYBRID = {"gemma2"}


def build(family, dtype="f32", seed=0, preset="tiny", **shape):
    """The bare *ForCausalLM model (not wrapped), random weights, eval mode, in `dtype`; Llama at any of hf_llama.py's
    presets (tinyllama: the 1.1B shape), with `shape` overriding the preset's sizes (hidden=, heads=, kv_heads=, ...)."""
    if family == "llama":
        model = hf_llama.build(preset, "f32", seed=seed, **shape).model
    else:
        model = hf_families.build(family, seed=seed).model  # each family's own attention (Gemma-2: eager, softcapped)
    return model.to(DTYPES[dtype]).eval()


class Step(torch.nn.Module):
    """forward(ids, pos) -> logits of the static-cache module (the two-argument form kiln generate feeds)."""

    def __init__(self, exportable):
        super().__init__()
        self.w = exportable

    def forward(self, ids, pos):
        return self.w(input_ids=ids, cache_position=pos)


def step_module(model, cache_len, hybrid=False):
    from transformers import GenerationConfig
    from transformers.integrations import executorch

    model.config.use_cache = True
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="hybrid" if hybrid else "static",
                                               max_length=cache_len,
                                               cache_config={"batch_size": 1, "max_cache_len": cache_len})
    wrapper = (executorch.TorchExportableModuleWithHybridCache if hybrid
               else executorch.TorchExportableModuleWithStaticCache)
    return Step(wrapper(model, batch_size=1, max_cache_len=cache_len)).eval()


def trace(model, cache_len, tokens, path, hybrid=False):
    """Traces the decoder step at `tokens` tokens into `path`; the cache buffers are zeroed first (the trace's own
    forward writes into them, and the archive's values are the state kiln starts from). `hybrid`: through
    TorchExportableModuleWithHybridCache (the sliding-window families, HYBRID)."""
    step = step_module(model, cache_len, hybrid)
    ids = torch.zeros(1, tokens, dtype=torch.long)
    pos = torch.arange(tokens)
    with torch.no_grad():
        traced = torch.jit.trace(step, (ids, pos), check_trace=False)
        for name, buf in traced.named_buffers():
            if "cache" in name or "cumulative_length" in name:
                buf.zero_()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(traced, str(path), _extra_files={"kiln_inputs.json": inputs_json({"ids": ids, "pos": pos})})


def generate(model, prompt, new_tokens):
    """model.generate(do_sample=False) from `prompt`: the prompt and new ids."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             attention_mask=torch.ones_like(ids))
    return [int(x) for x in out[0]]


def logits_along(model, ids):
    """Logits [len(ids), vocab] of one forward over `ids` without a cache (teacher forcing), in f32."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    return out.float()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("family", nargs="?", default="llama", choices=FAMILIES)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    p.add_argument("--cache", type=int, default=32, help="max_cache_len: positions the cache holds (default 32)")
    p.add_argument("--tokens", type=int, default=1, help="tokens per forward the trace is made at (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", choices=sorted(hf_llama.PRESETS), default="tiny",
                   help="llama only: hf_llama.py's shape (tinyllama: 1.1B parameters; needs -o)")
    for size in SHAPE_OPTIONS:
        p.add_argument(f"--{size.replace('_', '-')}", type=int, help=f"llama only: the preset's {size} replaced (needs -o)")
    p.add_argument("--generate", help="comma-separated prompt ids: print model.generate's ids instead of tracing")
    p.add_argument("--new", type=int, default=16, help="with --generate: new tokens (default 16)")
    p.add_argument("-o", "--output", type=pathlib.Path, default=None,
                   help="default: models/fixtures/hf_<family>_decode_tiny.pt (f32 llama only)")
    a = p.parse_args(argv)
    shape = {size: getattr(a, size) for size in SHAPE_OPTIONS if getattr(a, size) is not None}
    if (a.preset != "tiny" or shape) and (a.family != "llama" or a.output is None):
        sys.exit("--preset and the shape options are for llama and need -o PATH (other shapes are not fixtures)")
    model = build(a.family, a.dtype, a.seed, a.preset, **shape)
    if a.generate:
        print(",".join(str(i) for i in generate(model, [int(x) for x in a.generate.split(",")], a.new)))
        return
    if a.output is None:
        if a.family != "llama" or a.dtype != "f32":
            sys.exit("give -o PATH: only the f32 llama step is a fixture")
        a.output = pathlib.Path(__file__).resolve().parent / "fixtures" / "hf_llama_decode_tiny.pt"
    trace(model, a.cache, a.tokens, a.output, hybrid=a.family in HYBRID)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
