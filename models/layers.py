"""Ops of the GPT-2 / GPT-NeoX / Phi / StableLM families on x [2,8,32]: LayerNorm, GPT-2's Conv1D (addmm), abs,
clamp, the tanh GELU, the list-producing split / chunk / unbind (GPT-2's qkv split, NeoX's chunked rotary) and
index_select along an inner dim."""
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402

NAME = "layers"


class Layers(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(32, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(32))
            self.norm.bias.copy_(0.1 * torch.randn(32))
        self.conv_weight = nn.Parameter(torch.randn(32, 48) / 32 ** 0.5)  # GPT-2's Conv1D: x @ W + b, W [in, out]
        self.conv_bias = nn.Parameter(0.1 * torch.randn(48))

    def forward(self, x):
        h = self.norm(x)                                                   # layer_norm
        flat = h.view(-1, 32)
        y = torch.addmm(self.conv_bias, flat, self.conv_weight)            # addmm (Conv1D)
        y = y.view(2, 8, 48)
        a = F.gelu(y, approximate="tanh")                                  # gelu, tanh form
        b = torch.clamp(y, min=-0.5, max=0.75) + y.clamp_min(0.1) * 0.5    # clamp, clamp_min
        c = torch.abs(y) - y.clamp(max=0.2)                                # abs, clamp_max
        q, k, v = y.split(16, dim=2)                                       # split + ListUnpack
        v1, v2 = v.chunk(2, dim=-1)                                        # chunk
        first, *_, last = torch.unbind(k, dim=1)                           # unbind
        mix = torch.cat([q * torch.sigmoid(k) + (first - last).unsqueeze(1), v2, v1], dim=-1)
        picked = torch.index_select(mix, 1, torch.tensor([7, 0, 3]))       # index_select (dim 1, constant index)
        return F.layer_norm(a + b + c, (48,)), mix, picked                 # layer_norm without weight and bias


def main():
    torch.manual_seed(0)
    model = Layers()
    inputs = {"x": torch.randn(2, 8, 32)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
