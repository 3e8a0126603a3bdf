"""The kernel suite on the GPU machine: kiln vs PyTorch eager (and torch.compile with --compile), per case and dtype.

    python3 bench/run_suite.py [--filter T[,T...]] [--dtype f32|bf16|all] [--part i/n] [--limit-seconds S]
                               [--compile] [--max-autotune] [--kiln-timings rotated,hot[,launch]]
                               [--out FILE] [--resume FILE ...] [--commit SHA] [--jobs J]
    python3 bench/run_suite.py --dry-run ...       # no GPU (see below)
    python3 bench/run_suite.py --export-only ...   # only fill the trace cache (run_on_device.sh, while kiln builds)

A row is one case (cases.py) in one dtype. Two phases, so that nothing else is on the GPU while a row is timed:

1. prepare, --jobs rows at a time (default: one per CPU); nothing is timed:
   - trace the case to CASE.pt (on cuda: a trace can pin its device). Traces are kept in the trace cache,
     <--cache-dir>/traces/<device>-<key>/, key = hash of cases.py, the export code and the torch version: a
     warm machine's second call reuses them (and kiln's compile cache, <--cache-dir>/kiln, keyed by the file).
   - `kiln run CASE.pt --check --bench 3`: kiln compiles into its cache, runs its kernels on seeded inputs and
     compares them with LibTorch on the same GPU (DESIGN.md tolerances); the 3 forwards only pick N below.
   - with --compile: one cold torch.compile (default mode) of the case in a fresh process: its time is
     torch_compile.cold_compile_s, and it fills Inductor's on-disk caches (a fresh directory per run) for phase 2.
2. measure, one row at a time, until --limit-seconds:
   - kiln, only if its check PASSed, from its cache (nothing is compiled again), per --kiln-timings:
     rotated: `kiln run CASE.pt --bench N --graph --rotate-mb 3xL2` (one CUDA graph over copies of kiln's whole
     arena, weights included, that together exceed 3x L2: as PyTorch's rotated figure); hot: `--bench N --graph`
     (one arena); launch: `--bench N` (kernels launched one by one, the suite's figure before 2026-12).
     N so the timed loop lasts about --kiln-target-ms; the figure is CUDA events around N forwards, the mean.
   - eager (and torch.compile): the forward runs through torch.func.functional_call over one of several
     independent sets of (weights, buffers, inputs); K iterations are captured in one CUDA graph and timed with
     CUDA events around a replay, after warm-up; the figure is the median over R replays of replay time / K.
     rotated: the sets rotate every iteration, as many as make >= 3x L2 (at least 2, at most 512); hot: one set.
     torch.compile must match eager first (rel L2 1e-5 f32, 2e-2 bf16), else it is not timed. Its entry,
     torch_compile, carries its own `measured` stamp (date, commit, torch), so later summaries can reuse it.
   floor: max(bytes / 4.2e12, flops / peak) from cases.py; fraction_of_floor = floor / time.

Without --compile no torch.compile runs at all (summarize.py --compile-from takes it from an earlier JSON).
--dry-run: no GPU; prepare traces on the CPU and runs `kiln compile --ir loop`, `kiln compile --emit cuda` (nvcc
when on PATH) and, for cases of at most --dry-interpret-mflop MFLOP, `kiln run --check --interpret`; it reports
which cases fail. --device cpu runs both phases on the CPU (kiln through --interpret; wall-clock times that mean
nothing) to test the harness.

Results go to --out after every measured row; --resume FILE keeps the rows of earlier JSONs and skips them. Rows
that did not fit --limit-seconds are listed at the end and in the JSON's meta.not_run.
"""
import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import torch

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import cases as suite  # noqa: E402
from export_cases import case_path, export_case  # noqa: E402
import harness  # noqa: E402
from harness import (TOLERANCE, first_error_line, kiln_dry, normalize_row, parse_kiln_run, rel_l2,  # noqa: E402
                     resolve_commit, run_kiln, versions, write_results)

COMPILE_MODES = {"torch_compile": "default", "torch_compile_max_autotune": "max-autotune-no-cudagraphs"}
KILN_TIMINGS = ("rotated", "hot", "launch")
KILN_KEYS = {"rotated": "graph_rotated", "hot": "graph_hot", "launch": "launch"}
MIN_SETS, MAX_SETS, L2_FACTOR = 2, 512, 3
KILN_CHECK_ITERS = 3   # the check run's timing only picks N for the timing runs
# What a trace depends on besides the case's name and dtype: the trace cache's key hashes these and torch's version.
TRACE_SOURCES = (HERE / "cases.py", HERE / "export_cases.py", REPO / "models" / "kiln_export.py",
                 REPO / "models" / "llama.py")
# Planning estimates (seconds; measured on the H200 2026-11-30, see bench/README.md), used only to leave out rows
# that cannot fit before phase 1 spends time on them: CPU seconds to prepare a row, and GPU-phase seconds per row.
PLAN = {"prepare": 3.5, "prepare_compile": 6.0, "measure": 0.9, "measure_compile": 0.5}


# ------------------------------------------------------------------------------------------------- kiln

def kiln_bench_iters(ms, target_ms):
    return int(min(5000, max(KILN_CHECK_ITERS, math.ceil(target_ms / max(ms or 1.0, 1e-4)))))


KILN_BENCH_LINE = re.compile(r"(\d+) kernels, ([0-9.eE+-]+) ms per forward \(CUDA events around (\d+) forwards")
KILN_ROTATION = re.compile(r"rotating over (\d+) copies of the (?:weights and the )?arena \(([0-9.]+) MB\)")


def kiln_timing(opts, path, variant, iters):
    """One `kiln run --bench` from kiln's cache: {ms, forwards[, sets, rotated_mb]} or {error}."""
    extra = {"rotated": ["--graph", "--rotate-mb", round(L2_FACTOR * opts.l2_bytes / 1e6)], "hot": ["--graph"],
             "launch": ["--no-graph"]}[variant]
    rc, out, err, secs = run_kiln(opts.kiln, ["run", path, "--bench", iters, *extra], opts.kiln_timeout,
                                  kiln_env(opts))
    m, rot = KILN_BENCH_LINE.search(out), KILN_ROTATION.search(out)
    if rc != 0 or not m:
        return {"error": first_error_line(err) or first_error_line(out) or f"rc {rc}"}
    res = {"ms": float(m.group(2)), "forwards": int(m.group(3)), "wall_s": round(secs, 2)}
    if rot:
        res.update(sets=int(rot.group(1)), rotated_mb=float(rot.group(2)))
    if "compiled nothing" not in out:
        res["compiled_again"] = True   # a cache miss: the check run's artifacts were not found
    return res


# ---------------------------------------------------------------------------------------------- PyTorch

def set_bytes(state, inputs):
    return sum(t.numel() * t.element_size() for t in [*state.values(), *inputs.values()])


def fresh_like(t, gen):
    """A tensor of t's shape and dtype with t's mean and spread (a norm weight stays ~1 +- 0.1)."""
    if not t.is_floating_point() or t.numel() < 2 or not torch.isfinite(t).all():
        return t.clone()
    f = t.float()
    r = torch.randn(t.shape, generator=gen, device=t.device) * f.std() + f.mean()
    return r.to(t.dtype)


def make_sets(case, dtype, module, device, l2_bytes):
    """Independent (weights+buffers, inputs) sets; set 0 is the module's own state and the example inputs."""
    state0 = {k: v for k, v in module.state_dict(keep_vars=False).items()}
    inputs0 = case.make_inputs(dtype, device)
    per_set = set_bytes(state0, inputs0)
    n = min(MAX_SETS, max(MIN_SETS, math.ceil(L2_FACTOR * l2_bytes / per_set)))
    gen = torch.Generator(device=device).manual_seed(case.seed + 17)
    sets = [(state0, inputs0)]
    for i in range(1, n):
        state = {k: fresh_like(v, gen) for k, v in state0.items()}
        sets.append((state, case.make_inputs(dtype, device, seed=case.seed + 1000 + i)))
    return sets, per_set


def forward_fn(module):
    def fn(state, inputs):
        return torch.func.functional_call(module, state, (), inputs)
    return fn


class GpuTimer:
    """CUDA-graph timing: K iterations rotating over sets captured in one graph, median over replays."""

    def __init__(self, repeats, target_ms):
        self.repeats, self.target_ms = repeats, target_ms

    def estimate_ms(self, fn, sets):
        for i in range(3):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(10):
            fn(*sets[i % len(sets)])
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 10

    def time(self, fn, sets):
        est = self.estimate_ms(fn, sets)   # events around launches: an upper bound (includes Python)
        k = max(len(sets), math.ceil(self.target_ms / max(est, 1e-3)))
        k = min(max(k, len(sets)), 2000)
        k = math.ceil(k / len(sets)) * len(sets)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):
                fn(*sets[i % len(sets)])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        method = "cuda_graph"
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(k):
                    fn(*sets[i % len(sets)])
            run = graph.replay
        except Exception as e:  # some op refused capture: events around launches (includes launch overhead)
            torch.cuda.synchronize()
            method = f"events ({type(e).__name__}: {str(e)[:120]})"

            def run():
                for i in range(k):
                    fn(*sets[i % len(sets)])
        for _ in range(2):
            run()
        torch.cuda.synchronize()
        times = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(self.repeats):
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / k)
        return {"ms": statistics.median(times), "ms_min": min(times), "ms_max": max(times), "iters": k,
                "repeats": self.repeats, "sets": len(sets), "method": method}


class CpuTimer:
    """For testing the harness without a GPU: wall clock, meaningless as a benchmark."""

    def __init__(self, repeats, target_ms):
        self.repeats = min(repeats, 3)

    def time(self, fn, sets):
        fn(*sets[0])
        times = []
        for r in range(self.repeats):
            t = time.perf_counter()
            for i in range(len(sets)):
                fn(*sets[i])
            times.append((time.perf_counter() - t) * 1e3 / len(sets))
        return {"ms": statistics.median(times), "iters": len(sets), "repeats": self.repeats, "sets": len(sets),
                "method": "cpu_wall_clock (test only)"}


def compile_fn(module, mode):
    torch._dynamo.reset()
    return torch.compile(forward_fn(module), mode=None if mode == "default" else mode)


def warm_compile(case, dtype, device, mode):
    """One cold torch.compile + first call (also fills Inductor's on-disk caches for the measuring process)."""
    module, _ = case.build(dtype, device)
    sets = [(module.state_dict(), case.make_inputs(dtype, device))]
    fn = compile_fn(module, mode)
    start = time.perf_counter()
    fn(*sets[0])
    if device == "cuda":
        torch.cuda.synchronize()
    return round(time.perf_counter() - start, 2)


def measure_torch(case, dtype, opts, timer, cold_compile_s):
    device = opts.device
    module = case.build_module(dtype, device)
    sets, per_set = make_sets(case, dtype, module, device, opts.l2_bytes)
    eager = forward_fn(module)
    with torch.no_grad():
        reference = eager(*sets[0])
        res = {"rotation": {"sets": len(sets), "set_mb": round(per_set / 1e6, 3),
                            "rotated_mb": round(len(sets) * per_set / 1e6, 1)}}
        res["eager"] = {"rotated": timer.time(eager, sets), "hot": timer.time(eager, sets[:1])}
        for side, mode in opts.modes.items():
            entry = {"mode": mode, "measured": dict(opts.measured), "cold_compile_s": cold_compile_s.get(side)}
            res[side] = entry
            try:
                fn = compile_fn(module, mode)
                start = time.perf_counter()
                out = fn(*sets[0])
                if device == "cuda":
                    torch.cuda.synchronize()
                entry["first_call_s"] = round(time.perf_counter() - start, 2)
                entry["rel_l2_vs_eager"] = rel_l2(out, reference)
                entry["check"] = "PASS" if entry["rel_l2_vs_eager"] <= TOLERANCE[dtype] else "FAIL"
                if entry["check"] == "PASS":
                    entry["rotated"] = timer.time(fn, sets)
                    entry["hot"] = timer.time(fn, sets[:1])
            except Exception as e:
                entry["check"] = "ERROR"
                entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            finally:
                torch._dynamo.reset()
    del sets
    if device == "cuda":
        torch.cuda.empty_cache()
    return res


# ------------------------------------------------------------------------------------------ options, caches

@dataclasses.dataclass
class Options:
    kiln: str
    workdir: str
    trace_dir: str          # where CASE.pt files are (the trace cache, or the temporary workdir)
    keep_traces: bool       # True for the trace cache; False: a row's trace is deleted once it is done
    kiln_cache: str
    device: str
    dry_run: bool
    modes: dict
    kiln_timings: tuple
    kiln_timeout: float
    kiln_target_ms: float
    repeats: int
    target_ms: float
    skip_kiln: bool
    l2_bytes: int
    dry_interpret_mflop: float
    jobs: int
    measured: dict          # the stamp of every figure this run measures: date, commit, torch
    kiln_args: tuple = ()


def key(case, dtype):
    return f"{case.name}:{dtype}"


def pt_path(opts, case, dtype):
    return case_path(opts.trace_dir, case, dtype)


def kiln_env(opts):
    env = dict(os.environ)
    env.setdefault("KILN_CACHE_DIR", opts.kiln_cache)
    return env


def trace_key(device):
    """Changes when a trace could: the case definitions, the export code, torch, the device traced on."""
    h = hashlib.sha256()
    for p in TRACE_SOURCES:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(f"torch {torch.__version__} device {device}".encode())
    return f"{device}-{h.hexdigest()[:16]}"


def trace_cache_dir(cache_dir, device):
    """<cache_dir>/traces/<device>-<key>; other keys' directories for this device are removed (6.7 GB each)."""
    root = pathlib.Path(cache_dir) / "traces"
    mine = root / trace_key(device)
    if root.is_dir():
        for old in root.glob(f"{device}-*"):
            if old != mine and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    mine.mkdir(parents=True, exist_ok=True)
    return mine


def worker_threads(opts):
    return str(max(1, (os.cpu_count() or 2) // max(1, opts.jobs)))


def worker_env(opts):
    env = dict(os.environ)   # the workers share the CPUs: keep their thread pools small
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", worker_threads(opts))
    env.setdefault("OMP_NUM_THREADS", worker_threads(opts))
    return env


# ------------------------------------------------------------------------------------------ phase 1: prepare

def export_chunk_main(names, opts):
    """Worker process: trace each (case, dtype) into opts.trace_dir unless there already; one EXPORTED line each."""
    tdir = pathlib.Path(opts.trace_dir)
    tmp = tdir / f".tmp-{os.getpid()}"
    by_name = {c.name: c for c in suite.CASES}
    for name, dtype in names:
        case = by_name[name]
        final = case_path(tdir, case, dtype)
        res = {"key": f"{name}:{dtype}"}
        start = time.perf_counter()
        try:
            res["trace_cached"] = final.exists()
            if not res["trace_cached"]:
                os.replace(export_case(case, dtype, tmp, opts.device), final)   # whole files only
            res["export_s"] = round(time.perf_counter() - start, 2)
            res["pt_mb"] = round(final.stat().st_size / 1e6, 2)
        except Exception as e:
            res["export_error"] = f"{type(e).__name__}: {e}"[:400]
        print("EXPORTED " + json.dumps(res), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def cold_compile(case, dtype, opts, mode):
    """A cold torch.compile in a fresh Python process: (seconds or None, error or None)."""
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--cold-compile", case.name, dtype, mode,
           "--options-json", json.dumps(dataclasses.asdict(opts))]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=worker_env(opts))
    except subprocess.TimeoutExpired:
        return None, "cold compile ran past 600 s"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("COLD ")]
    if p.returncode != 0 or not lines:
        return None, f"rc {p.returncode}: {first_error_line(p.stderr)}"
    res = json.loads(lines[-1][len("COLD "):])
    return res.get("s"), res.get("error")


def finish_prepare(case, dtype, res, opts):
    """After the trace: kiln's check (or the dry-run compiles), then the cold torch.compile(s)."""
    path = pt_path(opts, case, dtype)
    if opts.dry_run:
        interpret = case.flops <= opts.dry_interpret_mflop * 1e6
        res["kiln"] = kiln_dry(opts.kiln, path, opts.workdir, opts.kiln_timeout, interpret)
    elif not opts.skip_kiln:
        args = ["run", path, "--check"]
        args += ["--interpret"] if opts.device == "cpu" else ["--bench", KILN_CHECK_ITERS]
        rc, out, err, secs = run_kiln(opts.kiln, args, opts.kiln_timeout, kiln_env(opts))
        res["kiln"] = parse_kiln_run(rc, out, err)
        res["kiln"]["check_run_s"] = round(secs, 2)
    # Cold compiles warm Inductor's caches, default mode only (max-autotune tunes only in the measuring process,
    # alone on the GPU; main() turns off Inductor's cache of tuned kernel configs, for the same reason).
    res["cold_compile_s"] = {}
    for side, mode in opts.modes.items():
        if mode == "default" and not opts.dry_run:
            res["cold_compile_s"][side], error = cold_compile(case, dtype, opts, mode)
            if error:
                res.setdefault("warm_errors", {})[side] = error
    if not opts.keep_traces and (opts.dry_run or "kiln" not in res or res["kiln"].get("check") != "PASS"):
        path.unlink(missing_ok=True)   # not needed in phase 2


def prepare_all(work, opts, deadline, export_only=False):
    """Phase 1 over `work`, --jobs chunks in parallel: each chunk's rows are traced by one worker process, and each
    row's kiln check (and cold compile) runs as soon as its trace is written. Returns {key: prep}; rows started after
    `deadline` are left out (not prepared)."""
    preps, lock = {}, threading.Lock()
    chunks = [work[i::opts.jobs] for i in range(opts.jobs) if work[i::opts.jobs]]

    def run_chunk(index, chunk):
        by_key = {key(c, d): (c, d) for c, d in chunk}
        err_path = pathlib.Path(opts.workdir) / f"export-{index}.err"
        with open(err_path, "w") as err:
            p = subprocess.Popen([sys.executable, str(pathlib.Path(__file__).resolve()), "--export-chunk",
                                  json.dumps([[c.name, d] for c, d in chunk]),
                                  "--options-json", json.dumps(dataclasses.asdict(opts))],
                                 stdout=subprocess.PIPE, stderr=err, text=True, env=worker_env(opts))
            for line in p.stdout:
                if not line.startswith("EXPORTED "):
                    continue
                res = json.loads(line[len("EXPORTED "):])
                case, dtype = by_key[res.pop("key")]
                if deadline and time.perf_counter() > deadline:
                    p.kill()
                    break
                start = time.perf_counter()
                if "export_error" not in res and not export_only:
                    try:
                        finish_prepare(case, dtype, res, opts)
                    except Exception as e:   # one row's failure is that row's
                        res["prepare_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                res["prepare_s"] = round(time.perf_counter() - start + res.get("export_s", 0), 2)
                with lock:
                    preps[key(case, dtype)] = res
            p.stdout.close()
            rc = p.wait()
        if not (deadline and time.perf_counter() > deadline):
            why = first_error_line(err_path.read_text())
            for k in by_key:
                if k not in preps:
                    preps[k] = {"prepare_error": f"trace worker ended (rc {rc}): {why}"}

    with concurrent.futures.ThreadPoolExecutor(max(1, len(chunks))) as pool:
        for f in [pool.submit(run_chunk, i, ch) for i, ch in enumerate(chunks)]:
            f.result()
    return preps


# ------------------------------------------------------------------------------------------ phase 2: measure

def base_row(case, dtype, prep):
    return {"case": case.name, "model": case.model, "kind": case.kind, "seq": case.seq, "dtype": dtype,
            "flops": case.flops, "bytes": case.bytes(dtype), "floor_ms": case.floor_s(dtype) * 1e3,
            "floor_bound": case.floor_bound(dtype), **{k: v for k, v in prep.items() if k != "cold_compile_s"}}


def measure(case, dtype, opts, prep):
    """Phase 2 for one row, alone on the GPU: kiln's timings (if its check passed), eager, torch.compile."""
    row = base_row(case, dtype, prep)
    if opts.dry_run or "export_error" in prep or "prepare_error" in prep:
        return row
    path = pt_path(opts, case, dtype)
    kiln = row.get("kiln")
    if kiln and kiln["check"] == "PASS" and opts.device == "cuda":
        iters = kiln_bench_iters(kiln["ms_check_run"], opts.kiln_target_ms)
        kiln["bench_iters"] = iters
        for variant in opts.kiln_timings:
            t = kiln_timing(opts, path, variant, iters)
            if variant == "launch":   # the pre-2026-12 layout: kiln.ms
                kiln.update({"ms": t["ms"], "method": "kiln --bench (launched, hot, mean)"} if "ms" in t
                            else {"bench_error": t["error"]})
            else:
                kiln[KILN_KEYS[variant]] = t
    timer = GpuTimer(opts.repeats, opts.target_ms) if opts.device == "cuda" else CpuTimer(opts.repeats, 0)
    try:
        row.update(measure_torch(case, dtype, opts, timer, prep.get("cold_compile_s", {})))
    except Exception as e:
        row["torch_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        traceback.print_exc()
    add_fractions(row)
    return row


def add_fractions(row):
    floor = row["floor_ms"]
    k = row.get("kiln") or {}
    for t in [k, k.get("graph_rotated"), k.get("graph_hot")]:
        if isinstance(t, dict) and t.get("ms"):
            t["fraction_of_floor"] = floor / t["ms"]
    for side in ["eager", *COMPILE_MODES]:
        for variant in ("rotated", "hot"):
            t = row.get(side, {}).get(variant)
            if t and t.get("ms"):
                t["fraction_of_floor"] = floor / t["ms"]


# ------------------------------------------------------------------------------------------ the run

def load_resume(paths):
    rows = {}
    for p in paths or []:
        p = pathlib.Path(p)
        if p.exists():
            data = json.loads(p.read_text())
            for r in data["results"]:
                if "prepare_error" not in r:   # a crashed worker's case runs again
                    rows[f"{r['case']}:{r['dtype']}"] = normalize_row(r, data["meta"], p.name)
    return rows


def us(ms):
    return "-" if ms is None else f"{ms * 1e3:.2f}" if ms < 0.01 else f"{ms * 1e3:.1f}"


def fig(row, side, variant):
    """ms of a figure: side kiln (variant rotated/hot/launch) or eager / torch_compile (rotated/hot)."""
    if side == "kiln":
        k = row.get("kiln") or {}
        t = k if variant == "launch" else k.get(KILN_KEYS[variant])
        return t.get("ms") if isinstance(t, dict) and k.get("check") == "PASS" else None
    t = (row.get(side) or {}).get(variant)
    return t.get("ms") if isinstance(t, dict) else None


def short_table(rows, dry_run):
    lines = []
    if dry_run:
        lines.append(f"{'case':36} {'dtype':5} {'kiln':12} {'kernels':>7}  error")
        for r in rows:
            k = r.get("kiln", {})
            err = (k.get("loop", {}).get("error") or k.get("emit", {}).get("error")
                   or k.get("interpret", {}).get("error") or r.get("export_error") or r.get("prepare_error", ""))
            interp = k.get("interpret")
            if interp and interp["check"] == "PASS":
                err = f"interpreter check PASS, rel_l2 {interp['rel_l2']:.2e}"
            lines.append(f"{r['case']:36} {r['dtype']:5} {k.get('status', 'export_failed'):12} "
                         f"{k.get('kernels', '-')!s:>7}  {err}")
        return "\n".join(lines)
    lines.append("us per forward; kiln from one CUDA graph; rot = rotated over >= 3x L2, hot = one set; "
                 "kiln/tc = kiln rot / torch.compile rot (< 1: kiln faster); %floor = floor / kiln rot")
    lines.append(f"{'case':34} {'dtype':5} {'floor':>7} {'kiln rot':>9} {'kiln hot':>9} {'eager rot':>9} "
                 f"{'eager hot':>9} {'tc rot':>9} {'kiln/tc':>7} {'%floor':>6}  notes")
    for r in rows:
        k = r.get("kiln") or {}
        notes = []
        if k and k.get("check") != "PASS":
            notes.append(f"kiln {k.get('check')}: {k.get('error', '')}"[:80])
        for v in ("graph_rotated", "graph_hot"):
            if isinstance(k.get(v), dict) and "error" in k[v]:
                notes.append(f"kiln {v}: {k[v]['error']}"[:80])
        for side in COMPILE_MODES:
            if side in r and r[side].get("check") != "PASS":
                notes.append(f"{side} {r[side].get('check')}")
        for bad in ("export_error", "prepare_error", "torch_error"):
            if bad in r:
                notes.append(f"{bad}: {r[bad]}"[:80])
        kr, tr = fig(r, "kiln", "rotated"), fig(r, "torch_compile", "rotated")
        ratio = f"{kr / tr:.2f}" if kr and tr else "-"
        frac = f"{100 * r['floor_ms'] / kr:.0f}%" if kr else "-"
        lines.append(f"{r['case']:34} {r['dtype']:5} {us(r['floor_ms']):>7} {us(kr):>9} "
                     f"{us(fig(r, 'kiln', 'hot')):>9} {us(fig(r, 'eager', 'rotated')):>9} "
                     f"{us(fig(r, 'eager', 'hot')):>9} {us(tr):>9} {ratio:>7} {frac:>6}  {'; '.join(notes)}")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="kiln's kernel suite against PyTorch (see the module docstring)")
    ap.add_argument("--filter", default=None, help="cases matching any of these comma-separated terms: a model, kind "
                    "or seq (or a run of them, e.g. tinyllama/q_proj) exactly, else a substring of the name")
    ap.add_argument("--dtype", default="all", choices=["f32", "bf16", "all"])
    ap.add_argument("--part", default=None, help="i/n: only the i-th (1-based) of n interleaved slices of the work")
    ap.add_argument("--limit-seconds", type=float, default=None,
                    help="wall-time budget of this script: rows that do not fit are left out and listed")
    ap.add_argument("--compile", action="store_true", help="also torch.compile (default mode): cold compile in "
                    "phase 1, timed in phase 2")
    ap.add_argument("--max-autotune", action="store_true", help="also torch.compile mode=max-autotune-no-cudagraphs")
    ap.add_argument("--kiln-timings", default="rotated,hot",
                    help="kiln figures, comma-separated: rotated (one CUDA graph over arena copies >= 3x L2), hot "
                         "(one CUDA graph, one arena), launch (kernels launched one by one); default rotated,hot")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: export on the CPU, kiln compile only")
    ap.add_argument("--export-only", action="store_true", help="only trace the rows into the trace cache")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/<UTC date>-h200.json; "
                                                "for --dry-run $TMPDIR/kiln-bench-dryrun-<date>.json)")
    ap.add_argument("--resume", nargs="*", default=[], help="results JSONs whose rows are kept and skipped")
    ap.add_argument("--commit", default=None, help="kiln commit to record (default: $KILN_COMMIT, else git here)")
    ap.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    ap.add_argument("--workdir", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--cache-dir", default=None, help="trace and kiln caches (default bench/.cache on cuda; none, "
                    "i.e. traces deleted after use, for --dry-run and --device cpu)")
    ap.add_argument("--device", default=None, choices=["cuda", "cpu"],
                    help="default cuda; cpu only tests the harness (kiln --interpret, wall-clock times)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel phase-1 workers (default: one per CPU)")
    ap.add_argument("--repeats", type=int, default=15, help="timed CUDA-graph replays per PyTorch figure (median)")
    ap.add_argument("--target-ms", type=float, default=4.0, help="aimed length of one timed replay")
    ap.add_argument("--kiln-target-ms", type=float, default=100.0, help="aimed length of each kiln timed loop")
    ap.add_argument("--kiln-timeout", type=float, default=120.0, help="seconds per kiln call")
    ap.add_argument("--dry-interpret-mflop", type=float, default=100.0,
                    help="dry run: also `kiln run --check --interpret` for cases of at most this many MFLOP")
    ap.add_argument("--skip-kiln", action="store_true")
    ap.add_argument("--kiln-args", default="", help="extra arguments for every kiln compile/run, e.g. "
                    "'--enable-pass tile-tiled-contractions' (recorded in the JSON's args)")
    ap.add_argument("--export-chunk", help=argparse.SUPPRESS)
    ap.add_argument("--cold-compile", nargs=3, metavar=("CASE", "DTYPE", "MODE"), help=argparse.SUPPRESS)
    ap.add_argument("--options-json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    bad = [t for t in args.kiln_timings.split(",") if t and t not in KILN_TIMINGS]
    if bad:
        ap.error(f"--kiln-timings: {bad} not in {KILN_TIMINGS}")
    return args


def select_work(args):
    work = [(c, d) for c in suite.select(filter_substring=args.filter) for d in suite.dtypes_for(args.dtype)]
    if args.part:
        i, n = (int(x) for x in args.part.split("/"))
        if not 1 <= i <= n:
            sys.exit(f"--part {args.part}: need 1 <= i <= n")
        work = work[i - 1::n]
    return work


def plan(work, remaining_s, opts):
    """How many rows of `work` (a prefix) can fit `remaining_s` by the PLAN estimates (optimistic on purpose: rows
    are only left out here when they clearly cannot fit; phase 2 stops by the clock)."""
    compiling = "torch_compile" in opts.modes
    prep = PLAN["prepare"] + (PLAN["prepare_compile"] if compiling else 0)
    meas = PLAN["measure"] + (PLAN["measure_compile"] if compiling else 0)
    n = len(work)
    while n > 0 and 5 + math.ceil(n / opts.jobs) * prep + n * meas > remaining_s:
        n -= 1
    return n


def worker_main(args):
    opts = Options(**json.loads(args.options_json))
    opts.kiln_timings = tuple(opts.kiln_timings)
    harness.KILN_EXTRA_ARGS[:] = list(opts.kiln_args)
    torch.set_num_threads(int(worker_threads(opts)))
    if args.export_chunk:
        return export_chunk_main(json.loads(args.export_chunk), opts)
    name, dtype, mode = args.cold_compile
    case = next(c for c in suite.CASES if c.name == name)
    try:
        res = {"s": warm_compile(case, dtype, opts.device, mode)}
    except Exception as e:
        res = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    print("COLD " + json.dumps(res), flush=True)
    return 0


def main(argv=None):
    args = parse_args(argv)
    torch.set_grad_enabled(False)
    torch.backends.cuda.matmul.allow_tf32 = False     # f32 means f32: the floor uses the non-TF32 peak
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    # The prepare workers share the GPU, so kernel configs they tune are not trusted: no process writes or reads
    # Inductor's on-disk cache of tuned configs (its FX-graph and Triton caches stay on; this key is not in them).
    import torch._inductor.config as inductor_config
    inductor_config.autotune_local_cache = False
    if args.export_chunk or args.cold_compile:        # worker modes
        return worker_main(args)

    t0 = time.perf_counter()
    device = args.device or ("cpu" if args.dry_run else "cuda")
    if device == "cuda" and not args.export_only and not torch.cuda.is_available():
        sys.exit("no CUDA device: use --dry-run here, or --device cpu to test the harness")
    kiln = pathlib.Path(args.kiln)
    if not args.skip_kiln and not args.export_only and not os.access(kiln, os.X_OK):
        sys.exit(f"{kiln} is not an executable: build kiln first (bash scripts/build.sh)")
    now = datetime.datetime.now(datetime.timezone.utc)
    default_out = (pathlib.Path(tempfile.gettempdir()) / f"kiln-bench-dryrun-{now:%Y-%m-%d}.json" if args.dry_run
                   else HERE / "results" / f"{now:%Y-%m-%d}-h200.json")
    out = pathlib.Path(args.out or default_out)
    modes = {}
    if args.compile:
        modes["torch_compile"] = COMPILE_MODES["torch_compile"]
    if args.max_autotune:
        modes["torch_compile_max_autotune"] = COMPILE_MODES["torch_compile_max_autotune"]
    l2 = (torch.cuda.get_device_properties(0).L2_cache_size if device == "cuda" and torch.cuda.is_available()
          else 50 * 2 ** 20)
    jobs = args.jobs or (os.cpu_count() or 2)
    cache_dir = args.cache_dir or (str(HERE / ".cache") if device == "cuda" and not args.dry_run else None)
    commit, commit_source = resolve_commit(args.commit)
    measured = {"date_utc": now.isoformat(timespec="seconds"), "commit": commit, "torch": torch.__version__}

    done = load_resume(args.resume)
    work = [(c, d) for c, d in select_work(args) if key(c, d) not in done]
    meta = {"date_utc": measured["date_utc"], "commit": commit, "commit_source": commit_source,
            "versions": versions(args, kiln) if not args.export_only else {}, "args": vars(args), "device": device,
            "dry_run": args.dry_run, "torch_compile_measured": bool(modes),
            "floor": {"bandwidth_Bps": suite.BANDWIDTH, "peak_flops": suite.PEAK_FLOPS},
            "tolerance_rel_l2": TOLERANCE, "rotation": {"l2_bytes": l2, "l2_factor": L2_FACTOR,
                                                        "min_sets": MIN_SETS, "max_sets": MAX_SETS}}
    rows = dict(done)
    print(f"{len(work)} rows to run ({len(done)} resumed), {jobs} prepare workers, trace cache {cache_dir or 'off'}"
          f"{'' if args.export_only else f', out {out}'}", flush=True)

    workdir_ctx = (contextlib.nullcontext(args.workdir) if args.workdir
                   else tempfile.TemporaryDirectory(prefix="kiln-bench-"))
    with workdir_ctx as workdir:
        workdir = pathlib.Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        # Inductor's caches in a fresh directory of this run: the cold compiles are cold, and phase 2 finds what
        # they left there.
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(workdir / "inductor"))
        trace_dir = trace_cache_dir(cache_dir, device) if cache_dir else workdir / "traces"
        trace_dir.mkdir(parents=True, exist_ok=True)
        opts = Options(kiln=str(kiln.resolve()), workdir=str(workdir), trace_dir=str(trace_dir),
                       keep_traces=bool(cache_dir),
                       kiln_cache=str(pathlib.Path(cache_dir) / "kiln" if cache_dir else workdir / "kiln-cache"),
                       device=device, dry_run=args.dry_run, modes=modes,
                       kiln_timings=tuple(t for t in args.kiln_timings.split(",") if t),
                       kiln_timeout=args.kiln_timeout, kiln_target_ms=args.kiln_target_ms, repeats=args.repeats,
                       target_ms=args.target_ms, skip_kiln=args.skip_kiln, l2_bytes=l2,
                       dry_interpret_mflop=args.dry_interpret_mflop, jobs=jobs, measured=measured,
                       kiln_args=tuple(args.kiln_args.split()))
        harness.KILN_EXTRA_ARGS[:] = list(opts.kiln_args)

        if args.export_only:
            preps = prepare_all(work, opts, None, export_only=True)
            failed = {k: p for k, p in preps.items() if "export_error" in p or "prepare_error" in p}
            cached = sum(1 for p in preps.values() if p.get("trace_cached"))
            print(f"traced {len(preps) - len(failed) - cached} rows, {cached} from the cache, "
                  f"{len(failed)} failed, in {time.perf_counter() - t0:.1f} s -> {trace_dir}")
            for k, p in failed.items():
                print(f"  {k}: {p.get('export_error') or p.get('prepare_error')}")
            return 1 if failed else 0

        deadline = t0 + args.limit_seconds if args.limit_seconds else None
        planned = work
        if deadline and not args.dry_run:
            planned = work[:plan(work, deadline - time.perf_counter(), opts)]
        not_run = {key(c, d): "estimated not to fit --limit-seconds" for c, d in work[len(planned):]}

        print(f"phase 1: preparing {len(planned)} rows", flush=True)
        t1 = time.perf_counter()
        preps = prepare_all(planned, opts, deadline)
        meta["prepare_s"] = round(time.perf_counter() - t1, 1)
        print(f"phase 1: {len(preps)} rows prepared in {meta['prepare_s']} s "
              f"({sum(1 for p in preps.values() if p.get('trace_cached'))} traces from the cache)", flush=True)

        t2 = time.perf_counter()
        walls = []
        for case, dtype in planned:
            k = key(case, dtype)
            if k not in preps:
                not_run[k] = "not prepared before --limit-seconds"
                continue
            estimate = max(walls[-8:], default=3.0) * 1.2   # the costliest recent row, with a margin
            if deadline and not args.dry_run and time.perf_counter() + estimate > deadline:
                not_run[k] = "not measured before --limit-seconds"
                continue
            t = time.perf_counter()
            row = measure(case, dtype, opts, preps[k])
            row["wall_s"] = round(time.perf_counter() - t, 2)
            walls.append(row["wall_s"])
            if not opts.keep_traces:
                pt_path(opts, case, dtype).unlink(missing_ok=True)
            rows[k] = row
            meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
            write_results(out, meta, list(rows.values()))
            status = (row.get("kiln", {}).get("status") or row.get("kiln", {}).get("check")
                      or row.get("export_error") or row.get("prepare_error") or "")
            print(f"[{meta['elapsed_s']:7.1f} s] {case.name} {dtype}: {status} ({row['wall_s']} s)", flush=True)
        meta["measure_s"] = round(time.perf_counter() - t2, 1)
    meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
    meta["not_run"] = sorted(not_run, key=lambda k: [key(c, d) for c, d in work].index(k))
    meta["not_run_why"] = not_run
    write_results(out, meta, list(rows.values()))
    order = {key(c, d): i for i, (c, d) in enumerate((c, d) for c in suite.CASES for d in suite.DTYPES)}
    ordered = sorted(rows.values(), key=lambda r: order.get(f"{r['case']}:{r['dtype']}", 1e9))
    print()
    print(short_table(ordered, args.dry_run))
    print(f"\n{len(rows)} rows in {out}; phase 1 {meta['prepare_s']} s, phase 2 {meta['measure_s']} s, "
          f"total {meta['elapsed_s']} s")
    if not_run:
        print(f"NOT RUN ({len(not_run)} rows; run again with --resume {out}):")
        for k in meta["not_run"]:
            print(f"  {k}: {not_run[k]}")
    else:
        print("0 not run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
