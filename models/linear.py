"""Two nn.Linear layers: 64->48 with bias, 48->32 without; x [2,8,64]."""
import pathlib
import sys

import torch
import torch.nn as nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export, randomize_  # noqa: E402

NAME = "linear"


class TwoLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 48, bias=True)
        self.fc2 = nn.Linear(48, 32, bias=False)

    def forward(self, x):
        return self.fc2(self.fc1(x))


def main():
    torch.manual_seed(0)
    model = randomize_(TwoLinear(), seed=1)
    inputs = {"x": torch.randn(2, 8, 64)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
