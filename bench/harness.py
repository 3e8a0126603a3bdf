"""What the benchmark scripts share (run_suite.py, whole_model.py): running kiln and reading what it prints,
comparing outputs, recording versions, writing results atomically."""
import datetime
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
TOLERANCE = {"f32": 1e-5, "bf16": 2e-2}      # relative L2 error, DESIGN.md section 4


def first_error_line(text):
    """kiln's one-line user error, or the first line that looks like one."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"error|unsupported|not supported|cannot|FAIL|failed", ln, re.IGNORECASE):
            return ln[:400]
    return lines[-1][:400] if lines else ""


KILN_EXTRA_ARGS = []   # --kiln-args: appended to every `kiln compile` / `kiln run` (e.g. --enable-pass NAME)


def run_kiln(kiln, args, timeout, env=None):
    """Runs kiln; returns (rc, stdout, stderr, seconds). rc is 'timeout' when it ran past `timeout`."""
    if args and args[0] in ("compile", "run"):
        args = [*args, *KILN_EXTRA_ARGS]
    start = time.perf_counter()
    try:
        p = subprocess.run([str(kiln), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout, p.stderr, time.perf_counter() - start
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return "timeout", out, err, time.perf_counter() - start


def parse_kiln_run(rc, out, err):
    rel = [float(x) for x in re.findall(r"rel_l2 ([0-9.eE+-]+|nan|inf)", out)]
    bench = re.search(r"(\d+) kernels, ([0-9.eE+-]+) ms per forward", out)
    passed = rc == 0 and "check passed" in out
    res = {"rc": rc, "check": "PASS" if passed else "FAIL",
           "rel_l2": max(rel) if rel else None,
           "kernels": int(bench.group(1)) if bench else None,
           "ms_check_run": float(bench.group(2)) if bench else None}
    if not passed:
        res["error"] = first_error_line(err) or first_error_line(out)
    return res


PROFILE_ROW = re.compile(r"^\s+(\d+)\s+(\S+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%\s+(\d+ x \d+)\s+(\S+)$")


def parse_kiln_profile(out):
    """The table of `kiln run --bench N --profile` (kiln/driver/kernel_profile.h) as a dict: rows (kernel, launches
    per forward, us per launch, us per forward, share %, grid x block, source) and the sum in ms per forward."""
    rows = []
    for line in out.splitlines():
        m = PROFILE_ROW.match(line)
        if m:
            rows.append({"kernel": m.group(2), "launches": int(m.group(3)), "us_per_launch": float(m.group(4)),
                         "us_per_forward": float(m.group(5)), "share_pct": float(m.group(6)),
                         "grid_x_block": m.group(7), "source": m.group(8)})
    total = re.search(r"sum of the kernels: ([0-9.]+) ms per forward", out)
    return {"rows": rows, "sum_ms": float(total.group(1)) if total else None}


def kiln_dry(kiln, pt, workdir, timeout, interpret):
    """`kiln compile --ir loop`, then `--emit cuda` (nvcc when on PATH), then, if `interpret`,
    `kiln run --check --interpret` (kiln's Kernel IR in its CPU interpreter vs LibTorch). Returns a dict."""
    res = {}
    rc, out, err, secs = run_kiln(kiln, ["compile", pt, "--ir", "loop"], timeout)
    res["loop"] = {"rc": rc, "seconds": round(secs, 2)}
    if rc != 0:
        res["loop"]["error"] = first_error_line(err) or first_error_line(out)
        res["status"] = "loop_failed"
        return res
    emit_dir = pathlib.Path(workdir) / (pathlib.Path(pt).stem + ".emit")
    args = ["compile", pt, "--emit", "cuda", "-o", emit_dir]
    if shutil.which("nvcc") is None:
        args.append("--no-nvcc")
    rc, out, err, secs = run_kiln(kiln, args, timeout)
    shutil.rmtree(emit_dir, ignore_errors=True)
    res["emit"] = {"rc": rc, "seconds": round(secs, 2), "nvcc": "--no-nvcc" not in args}
    kernels = re.search(r"wrote (\d+) kernels", out)
    if kernels:
        res["kernels"] = int(kernels.group(1))
    if rc != 0:
        res["emit"]["error"] = first_error_line(err) or first_error_line(out)
        res["status"] = "emit_failed"
        return res
    res["status"] = "ok"
    if interpret:
        rc, out, err, secs = run_kiln(kiln, ["run", pt, "--check", "--interpret"], timeout)
        res["interpret"] = parse_kiln_run(rc, out, err)
        res["interpret"]["seconds"] = round(secs, 2)
        if res["interpret"]["check"] != "PASS":
            res["status"] = "interpret_check_failed"
    return res


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def rel_l2(a, b):
    """Largest relative L2 error over the outputs, computed in float64."""
    worst = 0.0
    for x, y in zip(as_tuple(a), as_tuple(b)):
        x, y = x.double(), y.double()
        denom = torch.linalg.vector_norm(y).item()
        err = torch.linalg.vector_norm(x - y).item()
        worst = max(worst, err / denom if denom > 0 else err)
    return worst


def resolve_commit(given=None):
    """(commit, where it came from): --commit, else $KILN_COMMIT, else `git rev-parse` here (+dirty). On the device
    the last can be wrong: its copy of .git can lag behind the tree it was given, so pass the SHA in."""
    if given:
        return given, "--commit"
    if os.environ.get("KILN_COMMIT"):
        return os.environ["KILN_COMMIT"], "KILN_COMMIT"
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if commit and dirty:
            commit += "+dirty"
    except (OSError, subprocess.SubprocessError):
        commit = None
    return commit, "git rev-parse here (on the device its .git can lag behind the tree: pass --commit)"


def versions(args, kiln):
    v = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
         "host": socket.gethostname(), "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:
        pass
    v["kiln_commit"], v["kiln_commit_source"] = resolve_commit(getattr(args, "commit", None))
    try:
        rc, out, err, _ = run_kiln(kiln, ["--version"], 30)
        text = (out or err).strip()
        v["kiln_version"] = text.splitlines()[0] if text else ""   # "kiln 0.1.0 (commit ...)"
        v["kiln_version_full"] = text                               # also LibTorch, CUDA, manifest format
    except OSError as e:   # not built (--skip-kiln)
        v["kiln_version"] = f"not run: {e}"
    if shutil.which("nvidia-smi"):
        p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True)
        v["gpu"] = p.stdout.strip()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        v["device_name"] = props.name
        v["l2_bytes"] = getattr(props, "L2_cache_size", None)
        v["cuda_runtime"] = torch.version.cuda
    if shutil.which("nvcc"):
        v["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return v


TORCH_COMPILE_SIDES = ("torch_compile", "torch_compile_max_autotune")


def normalize_row(row, meta, source=None):
    """A results row in today's layout. Before 2026-12 torch.compile's entries were called compile and
    compile_max_autotune and carried no stamp of their own: renamed, and stamped with their file's date and commit
    (`source`, if given, names that file)."""
    for old, new in (("compile", "torch_compile"), ("compile_max_autotune", "torch_compile_max_autotune")):
        if old in row and new not in row:
            row[new] = row.pop(old)
    v = meta.get("versions") or {}
    stamp = {"date_utc": meta.get("date_utc") or v.get("date_utc"), "commit": meta.get("commit") or v.get("kiln_commit"),
             "torch": v.get("torch")}
    if source:
        stamp["source"] = source
    for side in TORCH_COMPILE_SIDES:
        if isinstance(row.get(side), dict) and "measured" not in row[side]:
            row[side]["measured"] = stamp
    return row


def write_results(path, meta, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"meta": meta, "results": rows}, indent=1, default=str))
    tmp.replace(path)
