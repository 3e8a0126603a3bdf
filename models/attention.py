"""Single-head attention written out (no mask), x [1,16,32]."""
import math
import pathlib
import sys

import torch
import torch.nn as nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export, randomize_  # noqa: E402

NAME = "attention"


class Attention(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        q = self.q_proj(x)
        k = self.k_proj(x)
        v = self.v_proj(x)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(32)
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v)
        return self.o_proj(out)


def main():
    torch.manual_seed(0)
    model = randomize_(Attention(), seed=3)
    inputs = {"x": torch.randn(1, 16, 32)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
