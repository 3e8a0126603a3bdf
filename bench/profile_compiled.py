"""Runs one suite case under torch.compile (default mode) a few times on the GPU, so that a profiler
(`ncu -k regex:triton`) can look at the kernels Inductor generated for it. The case is named by its trace's stem,
as in the trace cache (`tinyllama__softmax__s512.bf16`).

    python3 bench/profile_compiled.py tinyllama__softmax__s512.bf16
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cases import CASES  # noqa: E402


def main(stem):
    name, dtype = stem.rsplit(".", 1)
    case = next(c for c in CASES if c.file_stem == name)
    module, inputs = case.build(dtype, "cuda")
    fn = torch.compile(module)
    with torch.no_grad():
        for _ in range(3):
            fn(**inputs)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1])
