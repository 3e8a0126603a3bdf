"""Plain TorchScript traces, without kiln_inputs.json: what `torch.jit.trace(model, (x,)).save(path)` gives.

kiln takes their input names from the forward's arguments and their shapes from --input; the CLI tests
(tests/unit/cli_plain_trace_test.cpp) run this script at test time, so these files are not in fixtures/
(scripts/device_check.sh runs every fixture without --input).

    python3 models/plain_trace.py OUT_DIR   # writes plain_mlp.pt, plain_two.pt, plain_cumprod.pt
"""
import pathlib
import sys

import torch
import torch.nn as nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import randomize_  # noqa: E402
from mlp import SwiGLUMLP  # noqa: E402


class TokensPlusFeatures(nn.Module):
    """Two inputs: token ids [B,S] i64 and features [B,S,48] -> [B,S,32]."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 32)
        self.proj = nn.Linear(48, 32)

    def forward(self, ids, features):
        return self.embed(ids) + self.proj(features)


class CumProd(nn.Module):
    def forward(self, x):
        return torch.cumprod(x * 2.0, -1)


def save(module, example, path):
    module.eval()
    with torch.no_grad():
        torch.jit.trace(module, example, check_trace=False).save(str(path))


def main(out_dir):
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    save(randomize_(SwiGLUMLP(), seed=2), (torch.randn(1, 8, 64),), out / "plain_mlp.pt")
    save(randomize_(TokensPlusFeatures(), seed=3), (torch.randint(0, 16, (1, 8)), torch.randn(1, 8, 48)),
         out / "plain_two.pt")
    save(CumProd(), (torch.randn(2, 8),), out / "plain_cumprod.pt")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
