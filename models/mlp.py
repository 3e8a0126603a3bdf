"""SwiGLU MLP (Llama-style), x [1,8,64]: down(silu(gate(x)) * up(x))."""
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export, randomize_  # noqa: E402

NAME = "mlp"


class SwiGLUMLP(nn.Module):
    def __init__(self, hidden=64, inter=128):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def main():
    torch.manual_seed(0)
    model = randomize_(SwiGLUMLP(), seed=2)
    inputs = {"x": torch.randn(1, 8, 64)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
