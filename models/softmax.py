"""Softmax over the last dim, x [2,4,16,16]."""
import pathlib
import sys

import torch
import torch.nn as nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402

NAME = "softmax"


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def main():
    torch.manual_seed(0)
    model = Softmax()
    inputs = {"x": torch.randn(2, 4, 16, 16)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
