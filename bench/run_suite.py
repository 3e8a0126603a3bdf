"""The kernel suite on the GPU machine: kiln vs PyTorch eager vs torch.compile, per case and dtype, with the floor.

    python3 bench/run_suite.py [--filter S[,S...]] [--dtype f32|bf16|all] [--part i/n] [--limit-seconds T]
                               [--max-autotune] [--out FILE] [--resume FILE ...] [--commit SHA] [--jobs J]
    python3 bench/run_suite.py --dry-run ...      # everything that needs no GPU (see below)

Per case and dtype:
  prepare (in a worker process, --jobs of them in parallel, while the GPU is not being timed):
    trace the case (on cuda) to a .pt; `kiln run CASE.pt --check --bench 3` (kiln compiles, runs its kernels and
    compares them with LibTorch on the same GPU); one torch.compile of the case, to time the cold compile and to
    fill Inductor's on-disk caches.
  measure (in this process, one case at a time, nothing else on the GPU):
    kiln: only if its check PASSed, `kiln run CASE.pt --bench N` again (compiled artifacts are cached), N chosen
      so the timed loop lasts about --kiln-target-ms. kiln's figure is the mean over N back-to-back forwards
      on one input set (its runtime cannot rotate inputs yet, so its data may stay in L2: see "hot" below).
    eager and torch.compile (default mode; also "max-autotune-no-cudagraphs" with --max-autotune): correctness
      first (torch.compile vs eager, relative L2 error, tolerance 1e-5 f32 / 2e-2 bf16 as in DESIGN.md; a
      side that fails is not timed), then GPU time:
        - the forward runs through torch.func.functional_call over one of several independent sets of
          (weights, buffers, inputs), rotated each iteration;
        - K iterations are captured in one CUDA graph, so neither side pays Python's launch overhead, and
          timed with CUDA events around a replay, after warm-up replays; the figure is the median over R
          replays of (replay time / K);
        - the number of sets is the smallest that makes the rotated bytes at least 3x the GPU's L2 (H200:
          50 MB), at least 2 and at most 512, so every set has left L2 by the time it is read again and no
          side gets its weights or activations from L2 across iterations. (Cases of a few hundred KB need
          hundreds of sets; the 512 cap leaves the smallest ones, e.g. rmsnorm s32 bf16 at 132 KB a set,
          at 1.3x L2 -- noted per case as rotated_mb.)
        - "hot": the same timing on one set repeated, as kiln's --bench does; this is the like-for-like figure
          against kiln until kiln's runtime rotates inputs.
  floor: max(bytes / 4.2e12, flops / peak) from cases.py; each side's fraction of the floor = floor / time
    (1.0 = at the floor).

--dry-run runs everything that needs no GPU: builds every case, traces it on the CPU into a temporary
directory, `kiln compile CASE.pt --ir loop` (does kiln lower it?), then `kiln compile CASE.pt --emit cuda`
(all of kiln's levels, and nvcc for sm_90 when nvcc is on PATH), and for cases of at most
--dry-interpret-mflop MFLOP `kiln run CASE.pt --check --interpret` (kiln's kernels in its CPU interpreter
against LibTorch on the CPU); it reports which cases fail and kiln's error line. Results JSON and the short table are written as in a real run (no timings).

Results are written after every case to --out (default bench/results/<UTC date>-h200.json); --resume FILE
loads earlier results and skips the cases they hold, so parts of one suite can run in separate device calls
and end in one file. The short table is printed last.
"""
import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import io
import json
import math
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import cases as suite  # noqa: E402
from export_cases import export_case  # noqa: E402
import harness  # noqa: E402
from harness import (TOLERANCE, first_error_line, kiln_dry, parse_kiln_run, rel_l2, run_kiln,  # noqa: E402
                     versions, write_results)

COMPILE_MODES = {"compile": "default", "compile_max_autotune": "max-autotune-no-cudagraphs"}
MIN_SETS, MAX_SETS, L2_FACTOR = 2, 512, 3
KILN_CHECK_ITERS = 3   # the check run's timing only picks N for the timing run


# ------------------------------------------------------------------------------------------------- kiln

def kiln_bench_iters(ms, target_ms):
    return int(min(5000, max(KILN_CHECK_ITERS, math.ceil(target_ms / max(ms, 1e-4)))))


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


def measure_torch(case, dtype, device, timer, modes, l2_bytes, cold_compile_s):
    module = case.build_module(dtype, device)
    sets, per_set = make_sets(case, dtype, module, device, l2_bytes)
    eager = forward_fn(module)
    with torch.no_grad():
        reference = eager(*sets[0])
        res = {"rotation": {"sets": len(sets), "set_mb": round(per_set / 1e6, 3),
                            "rotated_mb": round(len(sets) * per_set / 1e6, 1)}}
        res["eager"] = {"rotated": timer.time(eager, sets), "hot": timer.time(eager, sets[:1])}
        for side, mode in modes.items():
            entry = {"mode": mode, "cold_compile_s": cold_compile_s.get(side)}
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


# ------------------------------------------------------------------------------------------ one case

@dataclasses.dataclass
class Options:
    kiln: str
    workdir: str
    device: str
    dry_run: bool
    modes: dict
    kiln_timeout: float
    kiln_target_ms: float
    repeats: int
    target_ms: float
    skip_kiln: bool
    l2_bytes: int
    dry_interpret_mflop: float
    jobs: int
    kiln_graph: bool = False
    kiln_args: tuple = ()


def key(case, dtype):
    return f"{case.name}:{dtype}"


def pt_path(opts, case, dtype):
    return pathlib.Path(opts.workdir) / f"{case.file_stem}.{dtype}.pt"


def kiln_env(opts):
    env = dict(os.environ)
    env.setdefault("KILN_CACHE_DIR", str(pathlib.Path(opts.workdir) / "kiln-cache"))
    return env


def prepare(case, dtype, opts):
    """Worker part: export, kiln check (or the dry-run compile), torch.compile warm-up. Returns a dict."""
    res = {}
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            path = export_case(case, dtype, opts.workdir, opts.device)
        res["export_s"] = round(time.perf_counter() - start, 2)
        res["pt_mb"] = round(path.stat().st_size / 1e6, 2)
    except Exception as e:
        res["export_error"] = f"{type(e).__name__}: {e}"[:400]
        return res
    if opts.dry_run:
        interpret = case.flops <= opts.dry_interpret_mflop * 1e6
        res["kiln"] = kiln_dry(opts.kiln, path, opts.workdir, opts.kiln_timeout, interpret)
        path.unlink(missing_ok=True)
        return res
    if not opts.skip_kiln:
        args = ["run", path, "--check"]
        args += ["--interpret"] if opts.device == "cpu" else ["--bench", KILN_CHECK_ITERS]
        rc, out, err, secs = run_kiln(opts.kiln, args, opts.kiln_timeout, kiln_env(opts))
        res["kiln"] = parse_kiln_run(rc, out, err)
        res["kiln"]["check_run_s"] = round(secs, 2)
    # Warm torch.compile's caches, default mode only (max-autotune tunes only in the measuring process, alone
    # on the GPU); main() turns off Inductor's cache of tuned kernel configs, for the same reason.
    res["cold_compile_s"] = {}
    for side, mode in opts.modes.items():
        if mode != "default":
            continue
        try:
            res["cold_compile_s"][side] = warm_compile(case, dtype, opts.device, mode)
        except Exception as e:
            res["cold_compile_s"][side] = None
            res.setdefault("warm_errors", {})[side] = f"{type(e).__name__}: {str(e)[:300]}"
    return res


def prepare_in_subprocess(case, dtype, opts):
    """Runs prepare() in a fresh Python process, so a crash (or a CUDA context) stays there."""
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--prepare-one", case.name, dtype,
           "--options-json", json.dumps(dataclasses.asdict(opts))]
    timeout = opts.kiln_timeout + 600
    env = dict(os.environ)   # the workers share the CPUs: keep Inductor's compile pools small
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 2) // max(1, opts.jobs))))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"prepare_error": f"prepare ran past {timeout} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("PREPARED ")]
    if p.returncode != 0 or not lines:
        return {"prepare_error": f"rc {p.returncode}: {first_error_line(p.stderr)}"}
    return json.loads(lines[-1][len("PREPARED "):])


def measure(case, dtype, opts, prep):
    """Main-process part: kiln timing (if its check passed), eager and torch.compile. Updates and returns a row."""
    row = {"case": case.name, "model": case.model, "kind": case.kind, "seq": case.seq, "dtype": dtype,
           "flops": case.flops, "bytes": case.bytes(dtype), "floor_ms": case.floor_s(dtype) * 1e3,
           "floor_bound": case.floor_bound(dtype), **{k: v for k, v in prep.items() if k != "cold_compile_s"}}
    path = pt_path(opts, case, dtype)
    if opts.dry_run or "export_error" in prep or "prepare_error" in prep:
        return row
    kiln = row.get("kiln")
    if kiln and kiln["check"] == "PASS" and opts.device == "cuda":
        iters = kiln_bench_iters(kiln["ms_check_run"], opts.kiln_target_ms)
        rc, out, err, secs = run_kiln(opts.kiln, ["run", path, "--bench", iters], opts.kiln_timeout, kiln_env(opts))
        m = re.search(r"(\d+) kernels, ([0-9.eE+-]+) ms per forward", out)
        if rc == 0 and m:
            kiln.update({"ms": float(m.group(2)), "bench_iters": iters, "method": "kiln --bench (hot, mean)"})
        else:
            kiln["bench_error"] = first_error_line(err) or first_error_line(out) or f"rc {rc}"
        if opts.kiln_graph:   # the same forwards replayed from one CUDA graph: hot, then rotated like PyTorch's sets
            for variant, extra in (("graph_hot", []), ("graph_rotated", ["--rotate-mb", L2_FACTOR * opts.l2_bytes / 1e6])):
                rc, out, err, _ = run_kiln(opts.kiln, ["run", path, "--bench", iters, "--graph", *extra],
                                           opts.kiln_timeout, kiln_env(opts))
                m = re.search(r"(\d+) kernels, ([0-9.eE+-]+) ms per forward \(CUDA events around (\d+) forwards", out)
                sets = re.search(r"rotating over (\d+) copies of the arena \(([0-9.]+) MB\)", out)
                kiln[variant] = ({"ms": float(m.group(2)), "forwards": int(m.group(3)),
                                  **({"sets": int(sets.group(1)), "rotated_mb": float(sets.group(2))} if sets else {})}
                                 if rc == 0 and m else
                                 {"error": first_error_line(err) or first_error_line(out) or f"rc {rc}"})
    timer = GpuTimer(opts.repeats, opts.target_ms) if opts.device == "cuda" else CpuTimer(opts.repeats, 0)
    try:
        row.update(measure_torch(case, dtype, opts.device, timer, opts.modes, opts.l2_bytes,
                                 prep.get("cold_compile_s", {})))
    except Exception as e:
        row["torch_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        traceback.print_exc()
    add_fractions(row)
    return row


def add_fractions(row):
    floor = row["floor_ms"]
    if row.get("kiln", {}).get("ms"):
        row["kiln"]["fraction_of_floor"] = floor / row["kiln"]["ms"]
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
            for r in json.loads(p.read_text())["results"]:
                if "prepare_error" not in r:   # a crashed worker's case runs again
                    rows[f"{r['case']}:{r['dtype']}"] = r
    return rows


def fmt_ms(x):
    return "-" if x is None else (f"{x:.4f}" if x < 1 else f"{x:.3f}")


def side_ms(row, side, variant):
    timing = row.get(side, {}).get(variant)
    return timing.get("ms") if isinstance(timing, dict) else None


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
    lines.append(f"{'case':36} {'dtype':5} {'floor':>8} {'kiln':>9} {'eager':>9} {'eager hot':>9} "
                 f"{'compile':>9} {'cmp hot':>9} {'kiln/floor':>10}  notes   (ms; eager/compile rotated unless 'hot')")
    for r in rows:
        k = r.get("kiln", {})
        notes = []
        if k and k.get("check") != "PASS":
            notes.append(f"kiln {k.get('check')}: {k.get('error', '')}"[:80])
        for side in COMPILE_MODES:
            if side in r and r[side].get("check") != "PASS":
                notes.append(f"{side} {r[side].get('check')}")
        for bad in ("export_error", "prepare_error", "torch_error"):
            if bad in r:
                notes.append(f"{bad}: {r[bad]}"[:80])
        frac = k.get("fraction_of_floor")
        lines.append(f"{r['case']:36} {r['dtype']:5} {fmt_ms(r['floor_ms']):>8} {fmt_ms(k.get('ms')):>9} "
                     f"{fmt_ms(side_ms(r, 'eager', 'rotated')):>9} {fmt_ms(side_ms(r, 'eager', 'hot')):>9} "
                     f"{fmt_ms(side_ms(r, 'compile', 'rotated')):>9} {fmt_ms(side_ms(r, 'compile', 'hot')):>9} "
                     f"{'-' if frac is None else f'{frac:.3f}':>10}  {'; '.join(notes)}")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="kiln's kernel suite against PyTorch (see the module docstring)")
    ap.add_argument("--filter", default=None, help="only cases whose name contains one of these (comma-separated)")
    ap.add_argument("--dtype", default="all", choices=["f32", "bf16", "all"])
    ap.add_argument("--part", default=None, help="i/n: only the i-th (1-based) of n interleaved slices of the work")
    ap.add_argument("--limit-seconds", type=float, default=None, help="start no new case after this wall time")
    ap.add_argument("--max-autotune", action="store_true", help="also torch.compile mode=max-autotune-no-cudagraphs")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: export on the CPU, kiln compile only")
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/<UTC date>-h200.json; "
                                                "for --dry-run $TMPDIR/kiln-bench-dryrun-<date>.json)")
    ap.add_argument("--resume", nargs="*", default=[], help="results JSONs whose cases are kept and skipped")
    ap.add_argument("--commit", default=None, help="kiln commit to record (default: git rev-parse HEAD)")
    ap.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    ap.add_argument("--workdir", default=None, help="for traces and kiln's cache (default: a temporary dir)")
    ap.add_argument("--device", default=None, choices=["cuda", "cpu"],
                    help="default cuda; cpu only tests the harness (kiln --interpret, wall-clock times)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel prepare workers (default nproc/2, max 8)")
    ap.add_argument("--repeats", type=int, default=15, help="timed CUDA-graph replays per figure (median)")
    ap.add_argument("--target-ms", type=float, default=4.0, help="aimed length of one timed replay")
    ap.add_argument("--kiln-target-ms", type=float, default=300.0, help="aimed length of kiln's timed loop")
    ap.add_argument("--kiln-timeout", type=float, default=120.0, help="seconds per kiln call")
    ap.add_argument("--dry-interpret-mflop", type=float, default=100.0,
                    help="dry run: also `kiln run --check --interpret` for cases of at most this many MFLOP")
    ap.add_argument("--skip-kiln", action="store_true")
    ap.add_argument("--kiln-args", default="", help="extra arguments for every kiln compile/run, e.g. "
                    "'--enable-pass tile-tiled-contractions' (recorded in the JSON's args)")
    ap.add_argument("--kiln-graph", action="store_true",
                    help="also time kiln's forwards replayed from one CUDA graph, hot and rotated over arena copies "
                         "(kiln.graph_hot / kiln.graph_rotated in the JSON)")
    ap.add_argument("--skip-compile", action="store_true", help="no torch.compile (eager and kiln only)")
    ap.add_argument("--prepare-one", nargs=2, metavar=("CASE", "DTYPE"), help=argparse.SUPPRESS)
    ap.add_argument("--options-json", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def select_work(args):
    work = [(c, d) for c in suite.select(filter_substring=args.filter) for d in suite.dtypes_for(args.dtype)]
    if args.part:
        i, n = (int(x) for x in args.part.split("/"))
        if not 1 <= i <= n:
            sys.exit(f"--part {args.part}: need 1 <= i <= n")
        work = work[i - 1::n]
    return work


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

    if args.prepare_one:                               # worker mode
        opts = Options(**json.loads(args.options_json))
        harness.KILN_EXTRA_ARGS[:] = list(opts.kiln_args)
        case = next(c for c in suite.CASES if c.name == args.prepare_one[0])
        print("PREPARED " + json.dumps(prepare(case, args.prepare_one[1], opts)), flush=True)
        return 0

    t0 = time.perf_counter()
    device = args.device or ("cpu" if args.dry_run else "cuda")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: use --dry-run here, or --device cpu to test the harness")
    kiln = pathlib.Path(args.kiln)
    if not args.skip_kiln and not os.access(kiln, os.X_OK):
        sys.exit(f"{kiln} is not an executable: build kiln first (bash scripts/build.sh)")
    workdir_ctx = (contextlib.nullcontext(args.workdir) if args.workdir
                   else tempfile.TemporaryDirectory(prefix="kiln-bench-"))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    default_out = (pathlib.Path(tempfile.gettempdir()) / f"kiln-bench-dryrun-{date}.json" if args.dry_run
                   else HERE / "results" / f"{date}-h200.json")
    out = pathlib.Path(args.out or default_out)
    modes = {} if args.skip_compile else {"compile": "default"}
    if args.max_autotune and not args.skip_compile:
        modes["compile_max_autotune"] = COMPILE_MODES["compile_max_autotune"]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size if device == "cuda" else 50 * 2 ** 20
    jobs = args.jobs or max(1, min(8, (os.cpu_count() or 2) // 2))

    done = load_resume(args.resume)
    work = [(c, d) for c, d in select_work(args) if key(c, d) not in done]
    meta = {"versions": versions(args, kiln), "args": vars(args), "device": device, "dry_run": args.dry_run,
            "floor": {"bandwidth_Bps": suite.BANDWIDTH, "peak_flops": suite.PEAK_FLOPS},
            "tolerance_rel_l2": TOLERANCE, "rotation": {"l2_bytes": l2, "l2_factor": L2_FACTOR,
                                                        "min_sets": MIN_SETS, "max_sets": MAX_SETS}}
    rows = dict(done)
    print(f"{len(work)} case-dtypes to run ({len(done)} resumed), {jobs} prepare workers, out {out}", flush=True)

    with workdir_ctx as workdir:
        pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
        opts = Options(kiln=str(kiln.resolve()), workdir=str(workdir), device=device, dry_run=args.dry_run,
                       modes=modes, kiln_timeout=args.kiln_timeout, kiln_target_ms=args.kiln_target_ms,
                       repeats=args.repeats, target_ms=args.target_ms, skip_kiln=args.skip_kiln, l2_bytes=l2,
                       dry_interpret_mflop=args.dry_interpret_mflop, jobs=jobs, kiln_graph=args.kiln_graph,
                       kiln_args=tuple(args.kiln_args.split()))
        harness.KILN_EXTRA_ARGS[:] = list(opts.kiln_args)
        stopped = False
        chunk = 2 * jobs
        last_prepare_s = 0.0   # a batch is prepared only if the last one's time still fits before the limit
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for start in range(0, len(work), chunk):
                if args.limit_seconds and time.perf_counter() - t0 + last_prepare_s > args.limit_seconds:
                    stopped = True
                    break
                batch = work[start:start + chunk]
                t = time.perf_counter()
                preps = list(pool.map(lambda cd: prepare_in_subprocess(cd[0], cd[1], opts), batch))
                last_prepare_s = time.perf_counter() - t
                for (case, dtype), prep in zip(batch, preps):
                    if args.limit_seconds and time.perf_counter() - t0 > args.limit_seconds:
                        stopped = True
                        break
                    t = time.perf_counter()
                    row = measure(case, dtype, opts, prep)
                    row["wall_s"] = round(time.perf_counter() - t, 2)
                    pt_path(opts, case, dtype).unlink(missing_ok=True)
                    rows[key(case, dtype)] = row
                    meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
                    write_results(out, meta, list(rows.values()))
                    status = (row.get("kiln", {}).get("status") or row.get("kiln", {}).get("check")
                              or row.get("export_error") or row.get("prepare_error") or "")
                    print(f"[{meta['elapsed_s']:7.1f} s] {case.name} {dtype}: {status}", flush=True)
                if stopped:
                    break
    remaining = [key(c, d) for c, d in work if key(c, d) not in rows]
    meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
    meta["not_run"] = remaining
    write_results(out, meta, list(rows.values()))
    order = {key(c, d): i for i, (c, d) in enumerate((c, d) for c in suite.CASES for d in suite.DTYPES)}
    ordered = sorted(rows.values(), key=lambda r: order.get(f"{r['case']}:{r['dtype']}", 1e9))
    print()
    print(short_table(ordered, args.dry_run))
    print(f"\n{len(rows)} rows in {out}; {len(remaining)} not run"
          f"{' (stopped by --limit-seconds; rerun with --resume ' + str(out) + ')' if remaining else ''}; "
          f"{meta['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
