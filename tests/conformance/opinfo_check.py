"""kiln against PyTorch's own op tests: OpInfo's sample inputs (torch.testing._internal.common_methods_invocations) for
every op `kiln ops` lists, each traced with torch.jit.trace and run through `kiln run --check --interpret --inputs DIR`
on OpInfo's own values, in f32 and bf16.

    python3 tests/conformance/opinfo_check.py --kiln build/kiln                 # every sample (tens of minutes)
    python3 tests/conformance/opinfo_check.py --kiln build/kiln --sample 40 --seed 7   # 40 of them, chosen by the seed

Each sample ends as PASS (the check passed), REFUSED (exit 1 or 2 with one `kiln: error:` line: kiln says it does not
support it, or LibTorch itself rejects the sample), FAIL (the check failed: a result kiln computed that differs from
LibTorch's) or CRASH (any other exit, or an error of more than one line), or is SKIPPED before kiln runs (the sample
cannot be traced into a module of tensor inputs kiln takes: tensor lists, dtypes kiln has no input type for, outputs
that are not tensors). Exit status 1 when any sample is FAIL or CRASH and is not listed in --known (a file of
`op dtype index` lines, the known failures with the reason after a #), or REFUSED and not listed in --refused (the
reviewed list of samples kiln refuses, each with kiln's message after a #), 0 otherwise; a listed sample that is no
longer refused is reported (remove its line). `--table FILE` writes every sample's line, `--write-refused FILE` the
refused ones in --refused's format (after a full run: review the difference before committing it). Needs
`expecttest` (scripts/setup.sh installs it).
"""
import argparse
import concurrent.futures
import json
import pathlib
import random
import re
import subprocess
import sys
import tempfile

import torch

HERE = pathlib.Path(__file__).resolve().parent
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i64": torch.int64, "bool": torch.bool}
INPUT_TYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64", torch.bool: "bool"}


def kiln_ops(kiln):
    out = subprocess.run([kiln, "ops"], capture_output=True, text=True, check=True).stdout
    return {line.strip()[len("aten::"):] for line in out.splitlines() if line.strip().startswith("aten::")}


def samples(kiln, dtypes):
    """(op name, dtype name, index, OpInfo, SampleInput) for every sample of every op kiln supports."""
    from torch.testing._internal.common_methods_invocations import op_db
    supported = kiln_ops(kiln)
    for op in op_db:
        if op.aten_name not in supported or op.variant_test_name:
            continue
        for dname in dtypes:
            dtype = DTYPES[dname]
            if dtype not in op.supported_dtypes("cpu"):
                continue
            torch.manual_seed(0)
            for i, s in enumerate(op.sample_inputs("cpu", dtype, requires_grad=False)):
                yield op.name, dname, i, op, s


class Call(torch.nn.Module):
    """forward(x0, x1, ...): the op with the sample's tensors as inputs and its other arguments fixed."""

    def __init__(self, fn, template, kwargs):
        super().__init__()
        self.fn, self.template, self.kwargs = fn, template, kwargs

    def forward(self, *xs):
        it = iter(xs)
        args = [next(it) if isinstance(a, torch.Tensor) else a for a in self.template]
        return self.fn(*args, **self.kwargs)


def prepare(op, s, directory):
    """Trace the sample into directory/m.pt with its inputs as input0.bin, ...; the reason to skip it, or None."""
    template = [s.input, *s.args]
    if any(isinstance(a, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in a) for a in template):
        return "a tensor list"
    if any(isinstance(v, torch.Tensor) for v in s.kwargs.values()):
        return "a tensor keyword argument"
    tensors = [a.detach().contiguous() for a in template if isinstance(a, torch.Tensor)]
    if not tensors:
        return "no tensor input"
    if any(t.dtype not in INPUT_TYPES for t in tensors):
        return "an input dtype kiln has no input type for"
    names = [f"x{i}" for i in range(len(tensors))]
    # A forward with named arguments (kiln binds inputs by the forward's argument names).
    body = f"def forward(self, {', '.join(names)}):\n    return Call.forward(self, {', '.join(names)})\n"
    scope = {"Call": Call}
    exec(body, scope)  # noqa: S102 - a fixed template, names only
    cls = type("Sample", (Call,), {"forward": scope["forward"]})
    module = cls(op.op, template, dict(s.kwargs))
    try:
        with torch.no_grad():
            out = module(*tensors)
            traced = torch.jit.trace(module, tuple(tensors), check_trace=False)
    except Exception as e:  # noqa: BLE001 - any tracing failure is a skip, with its reason
        return f"not traceable ({str(e).splitlines()[0][:80] if str(e) else type(e).__name__})"
    outs = out if isinstance(out, (list, tuple)) else [out]
    if not outs or any(not isinstance(o, torch.Tensor) for o in outs):
        return "an output that is not a tensor"
    info = {"inputs": [{"name": n, "shape": list(t.shape), "dtype": INPUT_TYPES[t.dtype]} for n, t in zip(names, tensors)]}
    torch.jit.save(traced, str(directory / "m.pt"), _extra_files={"kiln_inputs.json": json.dumps(info)})
    io = directory / "io"
    io.mkdir()
    for i, t in enumerate(tensors):
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        (io / f"input{i}.bin").write_bytes(raw.numpy().tobytes())
    return None


def run_kiln(kiln, directory, timeout):
    """PASS, REFUSED, FAIL or CRASH, and the line that says why (the sample's own paths written as m.pt and DIR)."""
    verdict, why = run_kiln_raw(kiln, directory, timeout)
    why = why.replace(str(directory / "m.pt"), "m.pt").replace(str(directory), "DIR")
    return verdict, re.sub(r"___torch_mangle_[0-9]+", "___torch_mangle", why)  # (numbered by trace order)


def run_kiln_raw(kiln, directory, timeout):
    try:
        r = subprocess.run([kiln, "run", str(directory / "m.pt"), "--check", "--interpret", "--inputs", str(directory / "io")],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "CRASH", f"no answer in {timeout} s"
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    if r.returncode == 0 and "check passed" in r.stdout:
        return "PASS", ""
    if r.returncode == 1 and "check FAILED" in r.stdout:
        worst = [line.strip() for line in r.stdout.splitlines() if "FAIL" in line and "output" in line]
        return "FAIL", worst[0] if worst else "check FAILED"
    if r.returncode in (1, 2) and len(errors) == 1 and errors[0].startswith("kiln: error:"):
        return "REFUSED", errors[0][len("kiln: error: "):]
    return "CRASH", f"exit {r.returncode}: {(errors or ['no message'])[0][:160]}"


REFUSED_HEADER = """# Samples of tests/conformance/opinfo_check.py that kiln refuses in one line (issue 54), reviewed: each is outside
# what kiln compiles (zero-size tensors, f64 results, constant outputs, ...), with kiln's message after the #. A sample
# refused and not listed fails the check. Written by opinfo_check.py --write-refused after a full run.
"""


def load_known(path):
    known = set()
    if path and pathlib.Path(path).exists():
        for line in pathlib.Path(path).read_text().splitlines():
            fields = line.split("#")[0].split()
            if len(fields) == 3:
                known.add((fields[0], fields[1], int(fields[2])))
    return known


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--dtypes", default="f32,bf16,f16,i64,bool")
    ap.add_argument("--sample", type=int, default=0, help="check this many samples, chosen by --seed (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ops", default="", help="only these OpInfo names, comma-separated")
    ap.add_argument("--known", default=str(HERE / "known_failures.txt"))
    ap.add_argument("--refused", default=str(HERE / "refused.txt"))
    ap.add_argument("--write-refused", default="")
    ap.add_argument("--table", default="")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args(argv)
    chosen = list(samples(args.kiln, args.dtypes.split(",")))
    if args.ops:
        wanted = set(args.ops.split(","))
        chosen = [c for c in chosen if c[0] in wanted]
    if args.sample and args.sample < len(chosen):
        chosen = sorted(random.Random(args.seed).sample(chosen, args.sample), key=lambda c: c[:3])
    known = load_known(args.known)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        jobs = []
        for n, (name, dname, i, op, s) in enumerate(chosen):
            directory = pathlib.Path(tmp) / str(n)
            directory.mkdir()
            skip = prepare(op, s, directory)
            if skip:
                rows.append((name, dname, i, "SKIPPED", skip))
            else:
                jobs.append(((name, dname, i), pool.submit(run_kiln, args.kiln, directory, args.timeout)))
        for key, job in jobs:
            rows.append((*key, *job.result()))
    rows.sort(key=lambda r: r[:3])
    counts = {}
    for r in rows:
        counts[r[3]] = counts.get(r[3], 0) + 1
    lines = [f"{name} {dname} {i} {verdict} {why}".rstrip() for name, dname, i, verdict, why in rows]
    if args.table:
        pathlib.Path(args.table).write_text("\n".join(lines) + "\n")
    refused = load_known(args.refused)
    if args.write_refused:
        pathlib.Path(args.write_refused).write_text(REFUSED_HEADER + "".join(
            f"{name} {dname} {i}  # {why}\n" for name, dname, i, verdict, why in rows if verdict == "REFUSED"))
    bad = [r for r in rows if (r[3] in ("FAIL", "CRASH") and r[:3] not in known) or (r[3] == "REFUSED" and r[:3] not in refused)]
    for r in bad:
        new = " (a new refusal: if it is right, add it to refused.txt)" if r[3] == "REFUSED" else ""
        print(f"opinfo_check: {r[0]} {r[1]} sample {r[2]}: {r[3]} {r[4]}{new} (seed {args.seed})")
    for r in rows:
        if r[3] == "PASS" and r[:3] in refused:
            print(f"opinfo_check: {r[0]} {r[1]} sample {r[2]} passes now: remove its line from refused.txt")
    print(f"opinfo_check: {len(rows)} samples: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
          f"; {len(bad)} FAIL or CRASH not in {pathlib.Path(args.known).name} or REFUSED not in {pathlib.Path(args.refused).name}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
