"""Helper for exporting tiny TorchScript fixtures for kiln.

export(module, example_inputs, path) traces `module` on the example inputs and
saves it with a `kiln_inputs.json` extra file describing the inputs:

    {"inputs": [{"name": "x", "shape": [2, 8, 32], "dtype": "f32"}]}
"""
import json
import pathlib

import torch

_DTYPE_NAMES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.bool: "bool",
}

FIXTURES_DIR = pathlib.Path(__file__).resolve().parent / "fixtures"


def inputs_json(example_inputs):
    entries = []
    for name, t in example_inputs.items():
        if t.dtype not in _DTYPE_NAMES:
            raise ValueError(f"unsupported dtype {t.dtype} for input {name!r}")
        entries.append({"name": name, "shape": list(t.shape), "dtype": _DTYPE_NAMES[t.dtype]})
    return json.dumps({"inputs": entries})


def export(module, example_inputs, path):
    """Trace `module` with `example_inputs` (ordered dict name -> tensor) and save to `path`."""
    module.eval()
    with torch.no_grad():
        traced = torch.jit.trace(module, tuple(example_inputs.values()), check_trace=False)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(traced, str(path), _extra_files={"kiln_inputs.json": inputs_json(example_inputs)})
    print(f"wrote {path}")
    return path


def randomize_(module, seed=0):
    """Re-initialise every parameter with seeded random values (never zeros/ones)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif p.dim() == 1:
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
    return module
