"""Trace the kernel-suite cases to TorchScript files kiln can compile.

    python3 bench/export_cases.py DIR [--dtype f32|bf16|all] [--filter SUBSTRING[,SUBSTRING...]] [--device cpu|cuda]

writes DIR/<case name with / replaced by __>.<dtype>.pt, e.g. DIR/tinyllama__q_proj__s128.bf16.pt, through
models/kiln_export.py's export (which records the inputs in the file's kiln_inputs.json). Trace on cuda on the
GPU machine: a trace can pin the device it was made on, and kiln's check then runs LibTorch there.
"""
import argparse
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "models"))
import cases as suite  # noqa: E402
from kiln_export import export  # noqa: E402


def case_path(directory, case, dtype):
    return pathlib.Path(directory) / f"{case.file_stem}.{dtype}.pt"


def export_case(case, dtype, directory, device="cpu", quiet=True):
    """Trace one case; returns the path written."""
    module, inputs = case.build(dtype, device)
    path = case_path(directory, case, dtype)
    if quiet:  # kiln_export prints a line per file
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            export(module, inputs, path)
    else:
        export(module, inputs, path)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="output directory")
    ap.add_argument("--dtype", default="all", choices=["f32", "bf16", "all"])
    ap.add_argument("--filter", default=None, help="only cases whose name contains one of these (comma-separated)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    chosen = suite.select(filter_substring=args.filter)
    if not chosen:
        sys.exit(f"no case matches --filter {args.filter!r}")
    for case in chosen:
        for dtype in suite.dtypes_for(args.dtype):
            export_case(case, dtype, args.dir, args.device, quiet=False)


if __name__ == "__main__":
    main()
