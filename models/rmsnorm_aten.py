"""RMSNorm via torch.nn.functional.rms_norm (aten::rms_norm), x [2,8,64]."""
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402

NAME = "rmsnorm_aten"


class RMSNormAten(nn.Module):
    def __init__(self, hidden=64, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (64,), self.weight, eps=self.eps)


def main():
    torch.manual_seed(0)
    model = RMSNormAten()
    inputs = {"x": torch.randn(2, 8, 64)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
