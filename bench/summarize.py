"""Tables and a chart from kernel-suite results.

    python3 bench/summarize.py bench/results/2026-12-01-h200.json [more.json ...] [-o bench/results/2026-12-01-h200]

writes PREFIX.md (tables, geomeans, counts, best and worst cases, the cases furthest from their floor) and
PREFIX.png (kiln vs eager vs torch.compile per case, log scale). Several JSONs (parts of one suite) are merged;
a later file's row for a case replaces an earlier one's. PREFIX defaults to the first JSON's path without .json.

Speed-ups are PyTorch time / kiln time (> 1: kiln is faster). The headline compares with PyTorch's "hot" figure
(one input set repeated), because that is how kiln's `--bench` times (its runtime cannot rotate inputs yet);
the tables also give PyTorch with rotated inputs, the figure a real model would see.
"""
import argparse
import json
import math
import pathlib
import sys

SIDES = {"eager": "eager", "compile": "torch.compile", "compile_max_autotune": "torch.compile max-autotune"}


def load(paths):
    """Merged (meta of the first file, rows in the suite's order: model, kind, seq)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from cases import KINDS
    meta, rows = None, {}
    for p in paths:
        data = json.loads(pathlib.Path(p).read_text())
        meta = meta or data["meta"]
        for r in data["results"]:
            rows[(r["case"], r["dtype"])] = r
    order = lambda r: (r["model"], KINDS.index(r["kind"]) if r["kind"] in KINDS else 99, r["seq"])  # noqa: E731
    return meta, sorted(rows.values(), key=order)


def torch_ms(row, side, variant):
    t = row.get(side, {}).get(variant)
    return t.get("ms") if isinstance(t, dict) else None


def kiln_ms(row):
    k = row.get("kiln") or {}
    return k.get("ms") if k.get("check") == "PASS" else None


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def us(ms):
    if ms is None:
        return "–"
    x = ms * 1e3
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def pct(x):
    if x is None:
        return "–"
    return f"{100 * x:.2g}%" if x < 0.1 else f"{100 * x:.0f}%"


def ratio(x):
    return "–" if x is None else f"{x:.2f}×"


def kiln_note(row):
    k = row.get("kiln")
    for bad in ("export_error", "prepare_error", "torch_error"):
        if bad in row:
            return f"{bad.replace('_', ' ')}: {row[bad]}"
    if not k:
        return "kiln not run"
    if k.get("check") == "FAIL":
        rel = k.get("rel_l2")
        return f"kiln check FAIL (rel_l2 {rel:.2e})" if rel is not None else f"kiln FAIL: {k.get('error', '')}"
    if k.get("bench_error"):
        return f"kiln bench: {k['bench_error']}"
    notes = []
    for side in SIDES:
        if side in row and row[side].get("check") not in (None, "PASS"):
            notes.append(f"{SIDES[side]} {row[side]['check']} {row[side].get('error', '')}".strip())
    return "; ".join(notes)


def summary_stats(rows, dtype, variant):
    """Geomeans, counts, best and worst of PyTorch/kiln for one dtype."""
    mine = [r for r in rows if r["dtype"] == dtype]
    out = {"dtype": dtype, "cases": len(mine), "kiln_pass": sum(1 for r in mine if kiln_ms(r))}
    for side in SIDES:
        pairs = [(r, torch_ms(r, side, variant) / kiln_ms(r)) for r in mine
                 if kiln_ms(r) and torch_ms(r, side, variant)]
        if not pairs:
            continue
        pairs.sort(key=lambda p: p[1])
        out[side] = {"n": len(pairs), "geomean": geomean([p[1] for p in pairs]),
                     "kiln_faster": sum(1 for _, s in pairs if s > 1),
                     "best": (pairs[-1][0]["case"], pairs[-1][1]), "worst": (pairs[0][0]["case"], pairs[0][1])}
    return out


def markdown(meta, rows, source_names):
    v = meta.get("versions", {})
    dtypes = [d for d in ("f32", "bf16") if any(r["dtype"] == d for r in rows)]
    lines = [f"# kiln kernel suite on the H200 — {v.get('date_utc', '')[:10]}", ""]
    lines += [f"- kiln {v.get('kiln_commit')} ({v.get('kiln_version', '')}); torch {v.get('torch')} "
              f"(CUDA {v.get('torch_cuda')}), triton {v.get('triton', '–')}; GPU {v.get('gpu', v.get('device_name'))}; "
              f"{v.get('nvcc', '')}",
              f"- from {', '.join(source_names)}; {len(rows)} case×dtype rows"
              + (f"; not run: {len(meta['not_run'])}" if meta.get("not_run") else ""),
              "- times in µs per forward. kiln: `kiln run --bench N`, mean of N back-to-back forwards on one input "
              "set, after its own `--check` passed. PyTorch: median over CUDA-graph replays of K iterations; "
              "*rot* = rotating over independent weight+input sets (≥ 3× L2), *hot* = one set repeated "
              "(as kiln's figure). torch.compile is timed only if it matches eager (rel L2 ≤ 1e-5 f32, 2e-2 bf16).",
              "- floor = max(bytes once / 4.2 TB/s, flops / peak (767 TFLOP/s bf16, 50 TFLOP/s f32)); "
              "% of floor = floor / time.", ""]

    lines += ["## Summary", "",
              "Speed-up = PyTorch time / kiln time (> 1: kiln faster); geomean over the cases where both ran.", "",
              "| dtype | kiln passed | vs | geomean speed-up | kiln faster | best | worst |",
              "|---|---|---|---|---|---|---|"]
    for dtype in dtypes:
        s = summary_stats(rows, dtype, "hot")
        for side, label in SIDES.items():
            if side not in s:
                continue
            x = s[side]
            lines.append(f"| {dtype} | {s['kiln_pass']}/{s['cases']} | {label} (hot) | "
                         f"{ratio(x['geomean'])} | {x['kiln_faster']}/{x['n']} | "
                         f"{x['best'][0]} {ratio(x['best'][1])} | {x['worst'][0]} {ratio(x['worst'][1])} |")
    lines += ["", "What L2 gives PyTorch (geomean of rotated time / hot time; > 1: the hot figure is flattered, and so "
              "is kiln's until its runtime rotates inputs):", ""]
    for dtype in dtypes:
        for side, label in SIDES.items():
            g = geomean([torch_ms(r, side, "rotated") / torch_ms(r, side, "hot") for r in rows
                         if r["dtype"] == dtype and torch_ms(r, side, "rotated") and torch_ms(r, side, "hot")])
            if g:
                lines.append(f"- {dtype} {label}: {ratio(g)}")
    lines.append("")

    for dtype in dtypes:
        lines += [f"## {dtype}", "",
                  "| case | floor | bound | kiln | kernels | eager rot | eager hot | compile rot | compile hot | "
                  "kiln % floor | eager % floor (rot) | compile % floor (rot) | eager hot / kiln | "
                  "compile hot / kiln | notes |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["dtype"] == dtype):
            k = kiln_ms(r)
            floor = r["floor_ms"]
            eh, ch = torch_ms(r, "eager", "hot"), torch_ms(r, "compile", "hot")
            er, cr = torch_ms(r, "eager", "rotated"), torch_ms(r, "compile", "rotated")
            lines.append(
                f"| {r['case']} | {us(floor)} | {r['floor_bound']} | {us(k)} | {(r.get('kiln') or {}).get('kernels') or '–'} | "
                f"{us(er)} | {us(eh)} | {us(cr)} | {us(ch)} | {pct(floor / k if k else None)} | "
                f"{pct(floor / er if er else None)} | {pct(floor / cr if cr else None)} | "
                f"{ratio(eh / k if k and eh else None)} | {ratio(ch / k if k and ch else None)} | {kiln_note(r)} |")
        lines.append("")

    graphed = [r for r in rows if isinstance((r.get("kiln") or {}).get("graph_rotated"), dict)]
    if graphed:  # run_suite.py --kiln-graph: kiln timed like PyTorch (one CUDA graph, rotated inputs and weights)
        lines += ["## kiln from one CUDA graph (`--kiln-graph`)", "",
                  "Like-for-like with PyTorch's rotated figures: kiln's forwards replayed from one CUDA graph, cycling "
                  "over copies of its whole arena (weights included) that together exceed 3× L2.", "",
                  "| case | dtype | kiln launches (hot) | kiln graph hot | kiln graph rot | copies | eager rot | compile rot | "
                  "eager rot / kiln graph rot | compile rot / kiln graph rot |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in graphed:
            k = r["kiln"]
            gh, gr = k.get("graph_hot", {}).get("ms"), k["graph_rotated"].get("ms")
            er, cr = torch_ms(r, "eager", "rotated"), torch_ms(r, "compile", "rotated")
            lines.append(f"| {r['case']} | {r['dtype']} | {us(kiln_ms(r))} | {us(gh)} | {us(gr)} | "
                         f"{k['graph_rotated'].get('sets', k['graph_rotated'].get('error', '–'))} | {us(er)} | {us(cr)} | "
                         f"{ratio(er / gr if er and gr else None)} | {ratio(cr / gr if cr and gr else None)} |")
        lines.append("")

    timed = sorted((r for r in rows if kiln_ms(r)), key=lambda r: r["floor_ms"] / kiln_ms(r))
    if timed:
        lines += ["## Furthest from the floor (kiln)", "",
                  "| case | dtype | bound | kiln | floor | % of floor | eager rot % of floor |", "|---|---|---|---|---|---|---|"]
        for r in timed[:12]:
            er = torch_ms(r, "eager", "rotated")
            lines.append(f"| {r['case']} | {r['dtype']} | {r['floor_bound']} | {us(kiln_ms(r))} | {us(r['floor_ms'])} | "
                         f"{pct(r['floor_ms'] / kiln_ms(r))} | {pct(r['floor_ms'] / er if er else None)} |")
        lines.append("")
    return "\n".join(lines)


def chart(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = [d for d in ("f32", "bf16") if any(r["dtype"] == d for r in rows)]
    width = max(12, 0.22 * max(sum(1 for r in rows if r["dtype"] == d) for d in dtypes))
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(width, 5.5 * len(dtypes)), squeeze=False)
    series = [("kiln", lambda r: kiln_ms(r), "o", "tab:red"),
              ("eager (rotated)", lambda r: torch_ms(r, "eager", "rotated"), "s", "tab:blue"),
              ("torch.compile (rotated)", lambda r: torch_ms(r, "compile", "rotated"), "^", "tab:green"),
              ("eager (hot)", lambda r: torch_ms(r, "eager", "hot"), "s", "lightsteelblue"),
              ("torch.compile (hot)", lambda r: torch_ms(r, "compile", "hot"), "^", "lightgreen"),
              ("floor", lambda r: r["floor_ms"], "_", "black")]
    for ax, dtype in zip(axes[:, 0], dtypes):
        mine = [r for r in rows if r["dtype"] == dtype]
        xs = list(range(len(mine)))
        for label, get, marker, color in series:
            pts = [(x, get(r) * 1e3) for x, r in zip(xs, mine) if get(r)]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=label,
                           s=60 if marker == "_" else 22, zorder=3 if label == "kiln" else 2)
        failed = [x for x, r in zip(xs, mine) if not kiln_ms(r)]
        for x in failed:
            ax.axvspan(x - 0.4, x + 0.4, color="tab:red", alpha=0.08, lw=0)
        ax.set_yscale("log")
        ax.set_ylabel("µs per forward (log)")
        ax.set_title(f"{dtype}: kiln vs PyTorch per case (shaded: kiln did not pass or did not run)")
        ax.set_xticks(xs)
        ax.set_xticklabels([r["case"] for r in mine], rotation=90, fontsize=6)
        ax.set_xlim(-1, len(mine))
        ax.grid(True, which="both", axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="results JSON(s) from run_suite.py")
    ap.add_argument("-o", "--prefix", default=None, help="output prefix (default: first JSON without .json)")
    ap.add_argument("--no-chart", action="store_true")
    args = ap.parse_args(argv)
    meta, rows = load(args.results)
    if meta.get("dry_run"):
        sys.exit("these are dry-run results (no timings): nothing to summarise")
    prefix = pathlib.Path(args.prefix or str(pathlib.Path(args.results[0]).with_suffix("")))
    md = prefix.with_suffix(".md")
    md.write_text(markdown(meta, rows, [pathlib.Path(p).name for p in args.results]))
    print(f"wrote {md}")
    if not args.no_chart:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            sys.exit("matplotlib is not installed: no chart (pip install matplotlib, or pass --no-chart)")
        png = prefix.with_suffix(".png")
        chart(rows, png)
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
