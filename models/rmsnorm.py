"""Llama-style RMSNorm written out, x [2,8,64]."""
import pathlib
import sys

import torch
import torch.nn as nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402

NAME = "rmsnorm"


class RMSNorm(nn.Module):
    def __init__(self, hidden=64, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x


def main():
    torch.manual_seed(0)
    model = RMSNorm()
    inputs = {"x": torch.randn(2, 8, 64)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
