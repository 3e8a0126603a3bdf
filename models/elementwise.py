"""Elementwise op chain on x [2,8,32]."""
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402

NAME = "elementwise"


class Elementwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(32))

    def forward(self, x):
        a = x + 1.5                      # add scalar
        b = a * x                        # mul tensor
        c = b - 0.25                     # sub scalar
        d = c / 3.0                      # div scalar
        e = torch.neg(d)                 # neg
        f = torch.exp(e * 0.1)           # exp, mul scalar
        pos = x * x + 1.0                # positive
        g = torch.rsqrt(pos)             # rsqrt
        h = torch.sqrt(pos)              # sqrt
        i = g.pow(2) + h.pow(3) * 0.01   # pow scalar exponents
        j = f - i                        # sub tensor
        k = j / (h + 0.5)                # div tensor
        l = torch.relu(k) + F.silu(x)    # relu, silu
        m = torch.sigmoid(l) * torch.tanh(x)  # sigmoid, tanh
        n = F.gelu(m + d)                # gelu (exact erf)
        return n * self.weight           # broadcast with learned weight [32]


def main():
    torch.manual_seed(0)
    model = Elementwise()
    inputs = {"x": torch.randn(2, 8, 32)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
