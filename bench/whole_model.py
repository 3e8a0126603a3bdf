"""Whole-model latency on the GPU machine: kiln vs PyTorch eager vs torch.compile on a TinyLlama-1.1B-shaped
transformers LlamaForCausalLM (random weights, no KV cache, input_ids -> logits), side by side in one run.

    python3 bench/whole_model.py [--configs bf16:1:128,f32:1:128,...] [--limit-seconds T] [--out FILE]
    python3 bench/whole_model.py --device cpu --preset tiny --configs f32:1:8    # smoke test, no GPU

Per config (dtype : batch : seq), in the order given:
  trace: models/hf_llama.py's model, built once per dtype on the device, traced on these input_ids (on the
    device: transformers' traces pin the device of their masks) to a .pt with its inputs recorded.
  kiln: `kiln run M.pt --check` with an empty compile cache (compile, nvcc, kiln's kernels vs LibTorch on the
    same GPU, DESIGN.md tolerances; it also times one forward); then `kiln run M.pt --bench N --no-graph` (must say
    "compiled nothing": the cache of the first run), N so the timed loop lasts about --kiln-target-ms. kiln's figure is the mean over N
    back-to-back forwards launched from C++ through the Driver API; with --kiln-graph also replayed from one CUDA
    graph; with --kiln-profile also each kernel alone (`kiln run --bench 20 --profile`: where the time goes).
    kiln's compile time is what its first run reports (every pass, writing weights, nvcc).
  eager: model(input_ids) from Python, CUDA events around I calls after warm-up, median of --repeats.
  torch.compile default and mode="reduce-overhead" (CUDA graphs): each after torch._dynamo.reset();
    first_call_s is its first call (dynamo + Inductor compile; Inductor's on-disk caches may hold kernels of an
    earlier config of this run); its logits are checked against eager first (rel L2 1e-5 f32, 2e-2 bf16), then
    timed as eager is.
  floor: max(bytes / 4.2 TB/s, flops / peak); bytes = every weight read once + input ids + logits written;
    flops = 2 per multiply-add of every matrix product (embedding lookup excluded) + causal attention's kept half.
TF32 is off (f32 means f32, as in the floor and in bench/run_suite.py). Results are written after each config
to --out (default bench/results/<UTC date>-h200-model.json); the table is printed last.
"""
import argparse
import datetime
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time
import traceback

import torch

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "models"))
import cases as suite  # noqa: E402
import hf_llama  # noqa: E402
from kiln_export import export  # noqa: E402
import harness  # noqa: E402
from harness import TOLERANCE, first_error_line, parse_kiln_run, rel_l2, run_kiln, versions, write_results  # noqa: E402

DEFAULT_CONFIGS = "bf16:1:128,f32:1:128,bf16:8:128,f32:8:128,bf16:1:1,f32:1:1"
MODES = {"compile": "default", "compile_reduce_overhead": "reduce-overhead"}


def parse_configs(text):
    out = []
    for item in text.split(","):
        dtype, batch, seq = item.split(":")
        if dtype not in suite.DTYPES:
            raise SystemExit(f"--configs: dtype must be one of {sorted(suite.DTYPES)}, not {dtype!r}")
        out.append((dtype, int(batch), int(seq)))
    return out


def floor_figures(config, dtype, batch, seq):
    """Analytic bytes / flops of one forward and the floor (seconds), as bench/cases.py counts them."""
    elt = suite.ELEMENT_BYTES[dtype]
    h, i, L, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    hd = h // heads
    tokens = batch * seq
    per_layer_matrix = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * i
    matrix_params = L * per_layer_matrix + v * h                      # + lm_head
    params = matrix_params + v * h + (2 * L + 1) * h                   # + embedding, norms
    weights_bytes = params * elt
    io_bytes = tokens * 8 + tokens * v * elt
    attention = L * batch * heads * 2 * 2 * hd * seq * (seq + 1) // 2   # q.k^T and p.v, causal half
    flops = 2 * matrix_params * tokens + attention
    floor_s = max((weights_bytes + io_bytes) / suite.BANDWIDTH, flops / suite.PEAK_FLOPS[dtype])
    return {"params": params, "bytes": weights_bytes + io_bytes, "flops": flops, "floor_ms": floor_s * 1e3,
            "floor_bound": "memory" if (weights_bytes + io_bytes) / suite.BANDWIDTH >= flops / suite.PEAK_FLOPS[dtype]
            else "compute"}


class Timer:
    """Median over `repeats` of (time of `iters` back-to-back calls) / iters, after warm-up; CUDA events on the
    GPU, wall clock on the CPU. `iters` is picked so one repeat lasts about target_ms."""

    def __init__(self, device, repeats, target_ms):
        self.device, self.repeats, self.target_ms = device, repeats, target_ms

    def _once(self, fn, iters):
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / iters
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t) * 1e3 / iters

    def time(self, fn):
        for _ in range(3):
            fn()
        estimate = self._once(fn, 1)
        iters = max(1, min(1000, round(self.target_ms / max(estimate, 1e-3))))
        times = [self._once(fn, iters) for _ in range(self.repeats)]
        return {"ms": statistics.median(times), "min_ms": min(times), "iters": iters, "repeats": self.repeats}


def run_kiln_side(opts, pt, env):
    """kiln's check run (cold cache; it also times one forward), then its timing run, which must hit the cache."""
    args = ["run", pt, "--check"] + (["--interpret"] if opts.device == "cpu" else ["--bench", 1])
    rc, out, err, secs = run_kiln(opts.kiln, args, opts.kiln_timeout, env)
    res = parse_kiln_run(rc, out, err)
    res["check_run_s"] = round(secs, 2)
    for line in out.splitlines():
        if line.startswith("kiln: compiled "):
            res["compile_line"] = line
            match = re.search(r"in ([0-9.]+) s", line)
            if match:
                res["compile_s"] = float(match.group(1))
        match = re.match(r"kiln: ran .* \((\d+) kernels\)", line)
        if match:
            res["kernels"] = int(match.group(1))
    if res["check"] != "PASS" or opts.device == "cpu":
        return res
    iters = int(max(2, min(1000, round(opts.kiln_target_ms / max(res["ms_check_run"], 1e-3)))))
    rc, out, err, secs = run_kiln(opts.kiln, ["run", pt, "--bench", iters, "--no-graph"], opts.kiln_timeout, env)
    timed = parse_kiln_run(rc, out, err)
    res["second_run_s"] = round(secs, 2)
    res["second_run_compiled_nothing"] = "compiled nothing" in out
    if rc != 0 or timed["ms_check_run"] is None:
        res["bench_error"] = first_error_line(err) or first_error_line(out) or f"rc {rc}"
        return res
    res.update({"ms": timed["ms_check_run"], "bench_iters": iters,
                "method": "kiln --bench: mean over back-to-back forwards after 3 warm-up forwards"})
    if opts.kiln_graph:  # kiln's fastest mode: the forward's kernels replayed from one CUDA graph
        rc, out, err, _ = run_kiln(opts.kiln, ["run", pt, "--bench", iters, "--graph"], opts.kiln_timeout, env)
        graph = parse_kiln_run(rc, out, err)
        res["graph"] = ({"ms": graph["ms_check_run"]} if rc == 0 and graph["ms_check_run"] is not None else
                        {"error": first_error_line(err) or first_error_line(out) or f"rc {rc}"})
    if opts.kiln_profile:  # each kernel alone, grouped by code, by time per forward
        rc, out, err, _ = run_kiln(opts.kiln, ["run", pt, "--bench", 20, "--profile"], opts.kiln_timeout, env)
        res["profile"] = (harness.parse_kiln_profile(out) if rc == 0 else
                          {"error": first_error_line(err) or first_error_line(out) or f"rc {rc}"})
    return res


def run_torch_side(opts, model, input_ids, timer):
    res = {}
    with torch.no_grad():
        reference = model(input_ids).float()
        res["eager"] = timer.time(lambda: model(input_ids))
        for side, mode in MODES.items():
            if side not in opts.sides:
                continue
            entry = res[side] = {"mode": mode}
            try:
                torch._dynamo.reset()
                fn = torch.compile(model, mode=None if mode == "default" else mode, dynamic=False)
                start = time.perf_counter()
                out = fn(input_ids).clone()
                if opts.device == "cuda":
                    torch.cuda.synchronize()
                entry["first_call_s"] = round(time.perf_counter() - start, 2)
                entry["rel_l2_vs_eager"] = rel_l2(out.float(), reference)
                entry["check"] = "PASS" if entry["rel_l2_vs_eager"] <= opts.tolerance else "FAIL"
                if entry["check"] == "PASS":
                    entry.update(timer.time(lambda: fn(input_ids)))
            except Exception as e:  # noqa: BLE001 -- recorded, the run goes on
                entry["check"] = "ERROR"
                entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                traceback.print_exc()
            finally:
                torch._dynamo.reset()
    return res


def fmt_ms(x):
    return "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def table(rows):
    lines = [f"{'config':<16} {'floor':>7} {'kiln':>9} {'eager':>8} {'compile':>8} {'c.r-o':>8} "
             f"{'kiln chk':>8} {'kiln rel_l2':>11} {'kiln comp s':>11} {'tc 1st s':>8} {'tc r-o 1st':>10}"
             "  (ms per forward)"]
    for r in rows:
        k = r.get("kiln", {})
        c, ro = r.get("compile", {}), r.get("compile_reduce_overhead", {})
        rel = k.get("rel_l2")
        lines.append(f"{r['config']:<16} {fmt_ms(r.get('floor_ms')):>7} {fmt_ms(k.get('ms')):>9} "
                     f"{fmt_ms(r.get('eager', {}).get('ms')):>8} {fmt_ms(c.get('ms')):>8} {fmt_ms(ro.get('ms')):>8} "
                     f"{k.get('check', '-'):>8} {('-' if rel is None else f'{rel:.2e}'):>11} "
                     f"{str(k.get('compile_s', '-')):>11} {str(c.get('first_call_s', '-')):>8} "
                     f"{str(ro.get('first_call_s', '-')):>10}")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"dtype:batch:seq,... (default {DEFAULT_CONFIGS})")
    ap.add_argument("--preset", default="tinyllama", choices=sorted(hf_llama.PRESETS))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: smoke test (kiln --interpret)")
    ap.add_argument("--sides", default="kiln,eager,compile,compile_reduce_overhead",
                    help="which of kiln, compile, compile_reduce_overhead to run (eager always runs)")
    ap.add_argument("--limit-seconds", type=float, default=None, help="start no config that would end after this wall time (judged by the longest so far)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    ap.add_argument("--kiln-timeout", type=float, default=400.0)
    ap.add_argument("--kiln-target-ms", type=float, default=1000.0, help="aimed length of kiln's timed loop")
    ap.add_argument("--target-ms", type=float, default=200.0, help="aimed length of one timed PyTorch repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--kiln-args", default="", help="extra arguments for every kiln run, e.g. '--enable-pass NAME'")
    ap.add_argument("--kiln-graph", action="store_true", help="also time kiln's forwards replayed from one CUDA graph")
    ap.add_argument("--kiln-profile", action="store_true", help="also time each of kiln's kernels alone (kiln run --profile)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    args.sides = set(args.sides.split(","))
    harness.KILN_EXTRA_ARGS[:] = args.kiln_args.split()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: use --device cpu --preset tiny for a smoke test")
    torch.set_grad_enabled(False)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    t0 = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = pathlib.Path(args.out or HERE / "results" / f"{date}-h200-model.json")
    configs = parse_configs(args.configs)
    meta = {"versions": versions(args, pathlib.Path(args.kiln)), "args": {k: (sorted(v) if isinstance(v, set) else v)
                                                                          for k, v in vars(args).items()},
            "preset": args.preset, "floor": {"bandwidth_Bps": suite.BANDWIDTH, "peak_flops": suite.PEAK_FLOPS},
            "tolerance_rel_l2": TOLERANCE}
    try:
        import transformers
        meta["versions"]["transformers"] = transformers.__version__
    except ImportError:
        pass
    rows, not_run = [], []
    timer = Timer(args.device, args.repeats, args.target_ms)
    with tempfile.TemporaryDirectory(prefix="kiln-model-") as work:
        work = pathlib.Path(work)
        model, model_dtype, longest = None, None, 0.0
        for dtype, batch, seq in configs:
            name = f"{dtype} {batch}x{seq}"
            # a config is started only if one as long as the longest so far still fits
            if args.limit_seconds and time.perf_counter() - t0 + longest > args.limit_seconds:
                not_run.append(name)
                continue
            row = {"config": name, "dtype": dtype, "batch": batch, "seq": seq, "preset": args.preset}
            start = time.perf_counter()
            try:
                if model_dtype != dtype:
                    model = None
                    if args.device == "cuda":
                        torch.cuda.empty_cache()
                    model = hf_llama.build(args.preset, dtype).to(args.device)
                    model_dtype = dtype
                config = model.model.config
                row.update(floor_figures(config, dtype, batch, seq))
                input_ids = hf_llama.example_inputs(config.vocab_size, batch, seq, seed=seq)["input_ids"].to(args.device)
                pt = work / f"{args.preset}-{dtype}-b{batch}s{seq}.pt"
                t = time.perf_counter()
                export(model, {"input_ids": input_ids}, pt)
                row["trace_s"] = round(time.perf_counter() - t, 2)
                args.tolerance = TOLERANCE[dtype]
                if "kiln" in args.sides:
                    env = dict(os.environ, KILN_CACHE_DIR=str(work / f"cache-{dtype}-b{batch}s{seq}"))
                    row["kiln"] = run_kiln_side(args, pt, env)
                pt.unlink(missing_ok=True)
                row.update(run_torch_side(args, model, input_ids, timer))
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                traceback.print_exc()
            row["wall_s"] = round(time.perf_counter() - start, 1)
            longest = max(longest, row["wall_s"])
            rows.append(row)
            meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
            meta["not_run"] = not_run
            write_results(out, meta, rows)
            print(f"[{meta['elapsed_s']:7.1f} s] {name}: kiln {row.get('kiln', {}).get('check', '-')}, "
                  f"{row['wall_s']} s", flush=True)
    meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
    meta["not_run"] = not_run
    write_results(out, meta, rows)
    print()
    print(table(rows))
    print(f"\n{len(rows)} configs in {out}; not run: {', '.join(not_run) or 'none'}; {meta['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
