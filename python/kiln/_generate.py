"""kiln.generate: greedy generation with a transformers causal LM, through `kiln generate` (docs/decode.md)."""
import copy
import json
import pathlib
import tempfile

import torch

from ._tool import run_kiln

# Families whose sliding-window layers transformers exports with TorchExportableModuleWithHybridCache.
_HYBRID = {"gemma2"}


class _Step(torch.nn.Module):
    """forward(ids, pos) -> logits of the static-cache module: the decoder-step trace `kiln generate` takes."""

    def __init__(self, exportable):
        super().__init__()
        self.w = exportable

    def forward(self, ids, pos):
        return self.w(input_ids=ids, cache_position=pos)


def trace_decoder_step(model, max_cache_len, path, tokens=1):
    """Traces `model` (a transformers *ForCausalLM) as a decoder step of `tokens` tokens over a static cache of
    `max_cache_len` positions into `path`, the cache zeroed (the trace's own forward wrote into it)."""
    from transformers import GenerationConfig
    from transformers.integrations import executorch

    model = copy.deepcopy(model).eval()  # its config and generation config are changed for the export
    hybrid = getattr(model.config, "model_type", "") in _HYBRID
    model.config.use_cache = True
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="hybrid" if hybrid else "static",
                                               max_length=max_cache_len,
                                               cache_config={"batch_size": 1, "max_cache_len": max_cache_len})
    wrapper = executorch.TorchExportableModuleWithHybridCache if hybrid else executorch.TorchExportableModuleWithStaticCache
    step = _Step(wrapper(model, batch_size=1, max_cache_len=max_cache_len)).eval()
    ids, pos = torch.zeros(1, tokens, dtype=torch.long), torch.arange(tokens)
    with torch.no_grad():
        traced = torch.jit.trace(step, (ids, pos), check_trace=False)
        for name, buf in traced.named_buffers():
            if "cache" in name or "cumulative_length" in name:
                buf.zero_()
    record = {"inputs": [{"name": "ids", "shape": [1, tokens], "dtype": "i64"}, {"name": "pos", "shape": [tokens], "dtype": "i64"}]}
    torch.jit.save(traced, str(path), _extra_files={"kiln_inputs.json": json.dumps(record)})


def generate(model, prompt_ids, max_new_tokens=16, max_cache_len=None, dtype=None, interpret=False, arch=None):
    """Greedy generation: `prompt_ids` (a list of ints or a 1-D / [1, n] tensor) and `max_new_tokens` new ids, as a list
    of ints (the prompt's first). The cache holds `max_cache_len` positions (default: the prompt and the new tokens,
    rounded up to a multiple of 16). dtype: "bf16" or "f16" casts the weights (`kiln generate --dtype`)."""
    if isinstance(prompt_ids, torch.Tensor):
        prompt_ids = prompt_ids.reshape(-1).tolist()
    prompt_ids = [int(i) for i in prompt_ids]
    if not prompt_ids or max_new_tokens < 1:
        raise ValueError("generate needs a prompt of at least one token and max_new_tokens >= 1")
    need = len(prompt_ids) + max_new_tokens
    max_cache_len = max_cache_len or -(-need // 16) * 16
    if max_cache_len < need:
        raise ValueError(f"max_cache_len {max_cache_len} holds fewer positions than the prompt and the new tokens ({need})")
    with tempfile.TemporaryDirectory(prefix="kiln-") as workdir:
        step = pathlib.Path(workdir) / "step.pt"
        trace_decoder_step(model, max_cache_len, step)
        args = ["generate", str(step), "--prompt-ids", ",".join(map(str, prompt_ids)), "--max-new-tokens", str(max_new_tokens)]
        args += ["--interpret"] if interpret else []
        args += ["--dtype", dtype] if dtype else []
        args += ["--arch", arch] if arch else []
        first = run_kiln(args).splitlines()[0]
    return [int(i) for i in first.split(",")]
