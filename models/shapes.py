"""Data-movement ops with literal shapes; x [2,4,8], y [8,4]."""
import pathlib
import sys

import torch
import torch.nn as nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kiln_export import export  # noqa: E402

NAME = "shapes"


class Shapes(nn.Module):
    def forward(self, x, y):
        a = torch.matmul(x, y)                       # [2,4,8] @ [8,4] -> [2,4,4] (broadcast)
        t = x.transpose(1, 2)                        # [2,8,4]
        p = x.permute(2, 0, 1).contiguous()          # [8,2,4]
        v = p.view(8, 8)                             # [8,8]
        r = v.reshape(2, 4, 8)                       # [2,4,8]
        b = torch.bmm(r, t)                          # [2,4,8] @ [2,8,4] -> [2,4,4] (3-D x 3-D)
        u = a.unsqueeze(1)                           # [2,1,4,4]
        e = u.expand(2, 3, 4, 4)                     # [2,3,4,4]
        s = e.sum(dim=1, keepdim=True).squeeze(1)    # [2,4,4]
        c = torch.matmul(b, s).to(torch.float32)     # 3-D @ 3-D -> [2,4,4]
        d = torch.matmul(c, x)                       # [2,4,4] @ [2,4,8] -> [2,4,8]
        return d.reshape(2, -1) + x.view(2, 32)      # [2,32]


def main():
    torch.manual_seed(0)
    model = Shapes()
    inputs = {"x": torch.randn(2, 4, 8), "y": torch.randn(8, 4)}
    return export(model, inputs, pathlib.Path(__file__).resolve().parent / "fixtures" / f"{NAME}.pt")


if __name__ == "__main__":
    main()
