"""SwiGLU MLP in bf16 wide enough for pipelined tensor-core products: x [1,64,192] bf16,
down(silu(gate(x)) * up(x)) with gate/up 192 -> 512 and down 512 -> 192 (reductions of 3 and 8 slices of 64)."""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export, randomize_  # noqa: E402
from mlp import SwiGLUMLP  # noqa: E402

NAME = "mlp_bf16_wide"


def main():
    torch.manual_seed(0)
    model = randomize_(SwiGLUMLP(hidden=192, inter=512), seed=3).to(torch.bfloat16)
    inputs = {"x": torch.randn(1, 64, 192).to(torch.bfloat16)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
