"""Reductions on x [2,8,32]; returns a tuple of 2 tensors."""
import pathlib
import sys

import torch
import torch.nn as nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402

NAME = "reductions"


class Reductions(nn.Module):
    def forward(self, x):
        s = x.sum(dim=-1, keepdim=True)          # [2,8,1]
        m = x.mean(dim=(1,), keepdim=False)      # [2,32]
        mx = x.amax(dim=-1, keepdim=True)        # [2,8,1]
        s02 = x.sum(dim=(0, 2))                  # [8]
        a = (x - mx) * s + m.unsqueeze(1)        # [2,8,32]
        b = s.squeeze(-1) + s02                  # [2,8]
        return a, b


def main():
    torch.manual_seed(0)
    model = Reductions()
    inputs = {"x": torch.randn(2, 8, 32)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
