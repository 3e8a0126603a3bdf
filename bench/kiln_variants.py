"""kiln against itself: the same suite cases compiled with different pass choices, checked and timed on the GPU.

    python3 bench/kiln_variants.py [--filter q_proj/s512,gate_proj/s512,...] [--dtype f32|bf16|all]
                                   [--variants "default;+tile-deep-k-slices;-tile-tiled-contractions"] [--out FILE]

Meant for the passes registered off by default (`kiln passes` marks them): before turning one on, this says
what it does to the time of representative matrix products, at their real sizes. A variant is a list of pass
choices separated by commas: "+NAME" enables a pass, "-NAME" disables one, "default" is kiln as it is, "+off"
enables every pass that is off by default, "shapes=FILE" takes product tiles from a --product-shapes table. The default variants: default, each off-by-default pass alone,
all of them, and the plain schedules (the tile passes disabled).

Per case, dtype and variant: `kiln run CASE.pt --check` (compiles into kiln's run cache and compares with LibTorch
on the same GPU; these run in parallel, --jobs), then, one at a time, `kiln run CASE.pt --bench N` (a cache hit:
only the timing; CUDA events around N back-to-back forwards, hot, as the suite's kiln column). Prints a table of
µs and TFLOP/s per variant and writes every figure to --out (JSON). PyTorch is not timed here: compare with the
suite's eager / torch.compile columns (bench/results/).
"""
import argparse
import concurrent.futures
import datetime
import json
import pathlib
import re
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cases as suite  # noqa: E402
import harness  # noqa: E402
from export_cases import export_case  # noqa: E402

DEFAULT_FILTER = ("tinyllama/q_proj/s128,tinyllama/k_proj/s128,tinyllama/q_proj/s512,tinyllama/gate_proj/s512,"
                  "tinyllama/down_proj/s512,tinyllama/sdpa_causal_gqa/s512,qwen2.5-7b/k_proj/s32,"
                  "qwen2.5-7b/gate_proj/s512")
TILE_PASSES = ("tile-tiled-contractions", "tile-tensor-core-contractions", "tile-fuse-operand-producers")


def off_by_default(kiln):
    rc, out, err, _ = harness.run_kiln(kiln, ["passes"], 60)
    if rc != 0:
        sys.exit(f"kiln passes failed: {harness.first_error_line(err)}")
    return re.findall(r"off by default: --enable-pass ([a-z0-9-]+)", out)


def default_variants(off):
    variants = ["default"] + [f"+{p}" for p in off]
    if len(off) > 1:
        variants.append("+off")
    variants.append(",".join(f"-{p}" for p in TILE_PASSES))
    return variants


def variant_args(variant, off):
    """kiln flags of one variant, e.g. "+a,-b" -> [--enable-pass a, --disable-pass b]."""
    args = []
    for choice in (c.strip() for c in variant.split(",")):
        if choice in ("", "default"):
            continue
        if choice == "+off":
            for p in off:
                args += ["--enable-pass", p]
        elif choice.startswith("shapes="):  # a --product-shapes table
            args += ["--product-shapes", choice[len("shapes="):]]
        elif choice[0] in "+-":
            args += ["--enable-pass" if choice[0] == "+" else "--disable-pass", choice[1:]]
        else:
            sys.exit(f"variant {variant!r}: {choice!r} is not +PASS, -PASS, +off, shapes=FILE or default")
    return args


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", default=DEFAULT_FILTER, help="case names or substrings, comma-separated")
    ap.add_argument("--dtype", default="all", choices=["f32", "bf16", "all"])
    ap.add_argument("--variants", default=None, help="semicolon-separated variants (default: see the module doc)")
    ap.add_argument("--kiln", default=str(HERE.parent / "build" / "kiln"))
    ap.add_argument("--jobs", type=int, default=8, help="parallel check runs (compiles)")
    ap.add_argument("--target-ms", type=float, default=200.0, help="aimed length of one timed loop")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--limit-seconds", type=float, default=450.0,
                    help="stop timing new rows after this much wall time (the JSON holds what ran; 450 s leaves a fresh device call room to build kiln)")
    ap.add_argument("--out", default=None, help="JSON (default /tmp/kiln-variants-<UTC date>.json)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: checks through --interpret, no timing (tests this script without a GPU)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    off = off_by_default(args.kiln)
    variants = args.variants.split(";") if args.variants else default_variants(off)
    wanted = [w.strip() for w in args.filter.split(",") if w.strip()]
    dtypes = ["f32", "bf16"] if args.dtype == "all" else [args.dtype]
    chosen = [c for c in suite.CASES if any(w in c.name for w in wanted)]
    if not chosen:
        sys.exit(f"no case matches --filter {args.filter!r} (python3 bench/cases.py lists them)")
    out = pathlib.Path(args.out or f"/tmp/kiln-variants-{datetime.datetime.now(datetime.timezone.utc):%F}.json")
    meta = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(), "variants": variants,
            "off_by_default": off, "device": args.device, "not_timed": []}
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-variants-") as workdir:
        paths = {(c.name, d): export_case(c, d, workdir, args.device) for c in chosen for d in dtypes}
        jobs = [(c, d, v) for c in chosen for d in dtypes for v in variants]

        def check(job):
            c, d, v = job
            extra = ["--interpret"] if args.device == "cpu" else []
            rc, o, e, secs = harness.run_kiln(args.kiln, ["run", paths[(c.name, d)], "--check", *extra,
                                                          *variant_args(v, off)], args.timeout)
            res = harness.parse_kiln_run(rc, o, e)
            res["check_run_s"] = round(secs, 2)
            return res

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            checks = list(pool.map(check, jobs))
        for (c, d, v), res in zip(jobs, checks):
            row = {"case": c.name, "dtype": d, "variant": v, "flops": c.flops, "floor_ms": c.floor_s(d) * 1e3, **res}
            if time.perf_counter() - start > args.limit_seconds:
                meta["not_timed"].append(f"{c.name}:{d}:{v}")
            elif res["check"] == "PASS" and args.device == "cuda":
                probe = harness.run_kiln(args.kiln, ["run", paths[(c.name, d)], "--bench", 3, *variant_args(v, off)],
                                         args.timeout)
                first = harness.parse_kiln_run(*probe[:3])["ms_check_run"] or 1.0
                iters = int(max(3, min(2000, args.target_ms / max(first, 1e-3))))
                rc, o, e, _ = harness.run_kiln(args.kiln, ["run", paths[(c.name, d)], "--bench", iters,
                                                          *variant_args(v, off)], args.timeout)
                timed = harness.parse_kiln_run(rc, o, e)
                row["ms"] = timed["ms_check_run"]
                row["bench_iters"] = iters
                row["tflops"] = c.flops / (row["ms"] * 1e-3) / 1e12 if row["ms"] else None
            rows.append(row)
            out.write_text(json.dumps({"meta": meta, "results": rows}, indent=1))  # after every row: a cut run keeps them
            print(f"{c.name:34s} {d:5s} {v:60.60s} {row['check']:4s} "
                  f"{'' if row.get('ms') is None else format(row['ms'] * 1e3, '10.1f') + ' us'}", flush=True)
    if meta["not_timed"]:
        print(f"\n{len(meta['not_timed'])} rows checked but not timed (--limit-seconds {args.limit_seconds:.0f})")
    print()
    print(table(rows, variants))
    print(f"\nwrote {out}")
    return 0


def table(rows, variants):
    """µs (TFLOP/s) per case × dtype, one column per variant; FAIL where the check failed."""
    names = {v: f"v{i}" for i, v in enumerate(variants)}
    lines = ["variants: " + "; ".join(f"{names[v]} = {v}" for v in variants),
             f"{'case':34s} {'dtype':5s} " + " ".join(f"{names[v]:>18s}" for v in variants)]
    keys = sorted({(r["case"], r["dtype"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for case, dtype in keys:
        cells = []
        for v in variants:
            r = next((r for r in rows if r["case"] == case and r["dtype"] == dtype and r["variant"] == v), None)
            if r is None:
                cells.append("-")
            elif r["check"] != "PASS":
                cells.append("FAIL")
            elif r.get("ms") is None:
                cells.append("PASS")
            else:
                cells.append(f"{r['ms'] * 1e3:.1f}us {r['tflops']:.1f}TF")
        lines.append(f"{case:34s} {dtype:5s} " + " ".join(f"{c:>18s}" for c in cells))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
