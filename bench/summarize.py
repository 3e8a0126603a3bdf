"""Tables and a chart from kernel-suite results.

    python3 bench/summarize.py RESULTS.json [more.json ...] [-o PREFIX] [--compile-from EARLIER.json ...] [--no-chart]

writes PREFIX.md and PREFIX.png (PREFIX: the first JSON's path without .json). Several JSONs (parts of one suite)
are merged; a later file's row replaces an earlier one's. --compile-from takes torch.compile's figures, for the rows
that have none (a run without --compile), from earlier JSONs; the .md says where and when each was measured (every
torch.compile entry carries its own `measured` stamp: date, kiln commit, torch).

The .md: a summary per dtype (geomean of PyTorch time / kiln time, > 1: kiln faster, the cases kiln wins, best and
worst), the memory-bound kinds (rmsnorm, softmax, silu_mul) against the HBM floor, a table per dtype, the rows
furthest from their floor. kiln is compared like for like: its CUDA-graph figure rotated over copies of its arena
against PyTorch's rotated figure. Results from before 2026-12, which have only kiln's launched figure on one input
set, are compared with PyTorch's hot figure instead (the .md says which).
"""
import argparse
import copy
import json
import math
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness import TORCH_COMPILE_SIDES, normalize_row  # noqa: E402

SIDES = {"eager": "eager", "torch_compile": "torch.compile", "torch_compile_max_autotune": "torch.compile max-autotune"}


def read(path, source=None):
    data = json.loads(pathlib.Path(path).read_text())
    return data["meta"], [normalize_row(r, data["meta"], source) for r in data["results"]]


def load(paths, compile_from=()):
    """(meta of the first file, rows in the suite's order: model, kind, seq; torch.compile merged from compile_from)."""
    from cases import KINDS
    meta, rows = None, {}
    for p in paths:
        m, rs = read(p)
        meta = meta or m
        for r in rs:
            rows[(r["case"], r["dtype"])] = r
    for p in compile_from:
        _, rs = read(p, pathlib.Path(p).name)
        for r in rs:
            mine = rows.get((r["case"], r["dtype"]))
            if mine is not None and not any(s in mine for s in TORCH_COMPILE_SIDES):
                for s in TORCH_COMPILE_SIDES:
                    if s in r:
                        mine[s] = copy.deepcopy(r[s])
    order = lambda r: (r["model"], KINDS.index(r["kind"]) if r["kind"] in KINDS else 99, r["seq"])  # noqa: E731
    return meta, sorted(rows.values(), key=order)


# ------------------------------------------------------------------------------------------------ figures

def torch_ms(row, side, variant):
    t = (row.get(side) or {}).get(variant)
    return t.get("ms") if isinstance(t, dict) else None


def kiln_fig(row, variant):
    """kiln's ms: variant rotated / hot (one CUDA graph, run_suite's default) or launch (kernels launched one by one,
    the only figure before 2026-12); None unless its check passed."""
    k = row.get("kiln") or {}
    if k.get("check") != "PASS":
        return None
    t = k if variant == "launch" else k.get("graph_" + variant)
    return t.get("ms") if isinstance(t, dict) else None


def basis(rows, meta=None):
    """'rotated' when kiln was timed rotated (compared with PyTorch rotated), else 'hot' (JSONs from before 2026-12,
    or a run with --kiln-timings hot)."""
    asked = ((meta or {}).get("args") or {}).get("kiln_timings")
    return "rotated" if any(kiln_fig(r, "rotated") for r in rows) or (asked and "rotated" in asked) else "hot"


def kiln_label(rows, b):
    return "kiln graph" if b == "rotated" or any(kiln_fig(r, "hot") for r in rows) else "kiln (launched)"


def kiln_ms(row, b):
    """kiln's headline figure on basis b: rotated graph; or hot graph, else the launched figure (also hot)."""
    return kiln_fig(row, "rotated") if b == "rotated" else (kiln_fig(row, "hot") or kiln_fig(row, "launch"))


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


def div(a, b):
    return a / b if a and b else None


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
    notes = [f"kiln {v}: {k[v]['error']}" for v in ("graph_rotated", "graph_hot")
             if isinstance(k.get(v), dict) and "error" in k[v]]
    if k.get("bench_error"):
        notes.append(f"kiln bench: {k['bench_error']}")
    for side in SIDES:
        if side in row and row[side].get("check") not in (None, "PASS"):
            notes.append(f"{SIDES[side]} {row[side]['check']} {row[side].get('error', '')}".strip())
    return "; ".join(notes)


def summary_stats(rows, dtype, b):
    """Geomeans, counts, best and worst of PyTorch / kiln for one dtype, on basis b."""
    mine = [r for r in rows if r["dtype"] == dtype]
    out = {"dtype": dtype, "cases": len(mine), "kiln_pass": sum(1 for r in mine if (r.get("kiln") or {}).get("check") == "PASS")}
    for side in SIDES:
        pairs = [(r, torch_ms(r, side, b) / kiln_ms(r, b)) for r in mine if kiln_ms(r, b) and torch_ms(r, side, b)]
        if not pairs:
            continue
        pairs.sort(key=lambda p: p[1])
        out[side] = {"n": len(pairs), "geomean": geomean([p[1] for p in pairs]),
                     "kiln_faster": sum(1 for _, s in pairs if s > 1),
                     "best": (pairs[-1][0]["case"], pairs[-1][1]), "worst": (pairs[0][0]["case"], pairs[0][1])}
    return out


def stamp_label(m):
    date = (m.get("date_utc") or "?")[:10]
    where = f"from {m['source']}, " if m.get("source") else ""
    return f"{where}measured {date} (kiln {m.get('commit') or '?'}, torch {m.get('torch') or '?'})"


def compile_provenance(rows):
    """Lines saying where each torch.compile column's figures come from."""
    lines = []
    for side in TORCH_COMPILE_SIDES:
        groups = {}
        for r in rows:
            if isinstance(r.get(side), dict):
                label = stamp_label(r[side].get("measured") or {})
                groups[label] = groups.get(label, 0) + 1
        missing = sum(1 for r in rows if side not in r)
        if groups:
            parts = [f"{n} rows {label}" for label, n in sorted(groups.items(), key=lambda g: -g[1])]
            lines.append(f"- {SIDES[side]}: " + "; ".join(parts) + (f"; {missing} rows without" if missing else ""))
    if not lines:
        lines.append("- torch.compile: not measured in this run (run_suite.py --compile, or summarize.py "
                     "--compile-from an earlier JSON)")
    return lines


# ------------------------------------------------------------------------------------------------ the .md

def memory_bound_section(rows, b, label="kiln graph"):
    """The memory-bound kinds against the HBM floor (bytes / 4.2 TB/s), kiln vs eager vs torch.compile."""
    from cases import BANDWIDTH, MEMORY_BOUND_KINDS
    mine = [r for r in rows if r["kind"] in MEMORY_BOUND_KINDS]
    if not mine:
        return []
    what = ("rotated: each side cycles over copies of its data (≥ 3× L2, at most 512 copies), so its figure "
            "reads HBM, not L2" if b == "rotated" else
            "hot (no rotated kiln figure in this run): small cases may be served from L2 and beat the HBM floor")
    lines = [f"## Memory-bound kinds ({', '.join(MEMORY_BOUND_KINDS)}) against the HBM floor", "",
             f"µs per forward, {what}. HBM floor = bytes / {BANDWIDTH / 1e12:.1f} TB/s (every input and weight read "
             "once, every output written once); % of floor = floor / time. kiln / torch.compile < 1: kiln faster.", "",
             f"| case | dtype | MB | HBM floor | {label} | eager | "
             "torch.compile | kiln / torch.compile | "
             "kiln % of floor | eager % of floor | torch.compile % of floor | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in mine:
        floor = r["bytes"] / BANDWIDTH * 1e3
        k, e, c = kiln_ms(r, b), torch_ms(r, "eager", b), torch_ms(r, "torch_compile", b)
        lines.append(f"| {r['case']} | {r['dtype']} | {r['bytes'] / 1e6:.2f} | {us(floor)} | {us(k)} | {us(e)} | "
                     f"{us(c)} | {ratio(div(k, c))} | {pct(div(floor, k))} | {pct(div(floor, e))} | "
                     f"{pct(div(floor, c))} | {kiln_note(r)} |")
    lines.append("")
    for dtype in ("f32", "bf16"):
        d = [r for r in mine if r["dtype"] == dtype]
        if not d:
            continue
        fl = lambda r: r["bytes"] / BANDWIDTH * 1e3  # noqa: E731
        g_ratio = geomean([div(kiln_ms(r, b), torch_ms(r, "torch_compile", b)) for r in d])
        parts = [f"kiln / torch.compile geomean {ratio(g_ratio)}" if g_ratio else None]
        for side, label in (("kiln", "kiln"), ("eager", "eager"), ("torch_compile", "torch.compile")):
            g = geomean([div(fl(r), kiln_ms(r, b) if side == "kiln" else torch_ms(r, side, b)) for r in d])
            if g:
                parts.append(f"{label} at {pct(g)} of the floor (geomean)")
        lines.append(f"- {dtype}: " + "; ".join(p for p in parts if p))
    lines.append("")
    return lines


def memory_bound_bar_section(rows):
    """Issue 11's bar on the memory-bound kinds, on the *hot* figures (both sides from one CUDA graph of several
    forwards on one set of data): kiln <= torch.compile on every row, and >= 70 % of the HBM floor at s512."""
    from cases import BANDWIDTH, MEMORY_BOUND_KINDS
    mine = [r for r in rows if r["kind"] in MEMORY_BOUND_KINDS]
    if not any(kiln_fig(r, "hot") and torch_ms(r, "torch_compile", "hot") for r in mine):
        return []  # the bar compares with torch.compile: nothing to say without its figures
    lines = ["## The memory-bound bar (hot figures)", "",
             "kiln ≤ torch.compile on every row, and kiln ≥ 70 % of the HBM floor at s512; both sides hot (one set of "
             "data, replayed from one CUDA graph of several forwards), so a case that fits in L2 can beat the floor.",
             "", "| case | dtype | kiln hot | torch.compile hot | kiln / torch.compile | kiln % of floor | bar |",
             "|---|---|---|---|---|---|---|"]
    met = 0
    for r in mine:
        k, c = kiln_fig(r, "hot"), torch_ms(r, "torch_compile", "hot")
        floor = r["bytes"] / BANDWIDTH * 1e3
        ok = k is not None and c is not None and k <= c and (r["seq"] != 512 or floor / k >= 0.7)
        met += ok
        why = [] if ok else (["slower than torch.compile"] if k is None or c is None or k > c else []) + \
            (["below 70 % of the floor"] if k and r["seq"] == 512 and floor / k < 0.7 else [])
        lines.append(f"| {r['case']} | {r['dtype']} | {us(k)} | {us(c)} | {ratio(div(k, c))} | {pct(div(floor, k))} | "
                     f"{'met' if ok else 'missed: ' + ', '.join(why)} |")
    lines += ["", f"- {met} of {len(mine)} rows meet the bar.", ""]
    return lines


def markdown(meta, rows, source_names):
    v = meta.get("versions", {})
    b = basis(rows, meta)
    dtypes = [d for d in ("f32", "bf16") if any(r["dtype"] == d for r in rows)]
    date = (meta.get("date_utc") or v.get("date_utc") or "")[:10]
    commit = meta.get("commit") or v.get("kiln_commit")
    source = meta.get("commit_source") or v.get("kiln_commit_source") or "as recorded on the device"
    launch_too = b == "rotated" and any(kiln_fig(r, "launch") for r in rows)
    lines = [f"# kiln kernel suite on the H200 — {date}", ""]
    kiln_version = (v.get("kiln_version") or "").splitlines()[0] if v.get("kiln_version") else ""
    lines += [f"- kiln {commit} ({source}; {kiln_version}); torch {v.get('torch')} "
              f"(CUDA {v.get('torch_cuda')}), triton {v.get('triton', '–')}; GPU {v.get('gpu', v.get('device_name'))}; "
              f"{v.get('nvcc', '')}",
              f"- from {', '.join(source_names)}; {len(rows)} case×dtype rows"
              + (f"; not run: {len(meta['not_run'])}" if meta.get("not_run") else "")]
    if b == "rotated":
        lines.append("- times in µs per forward. kiln, after its `--check` passed: `kiln run --bench N --graph` (N "
                     "forwards replayed from one CUDA graph, CUDA events, the mean); *rot* with `--rotate-mb` (cycling "
                     "over copies of its whole arena, weights included, ≥ 3× L2), *hot* on one arena.")
    elif kiln_label(rows, b) == "kiln graph":
        lines.append("- times in µs per forward. kiln, after its `--check` passed: `kiln run --bench N --graph` (N "
                     "forwards replayed from one CUDA graph on one arena, CUDA events, the mean): a *hot* figure, "
                     "compared with PyTorch's hot figures.")
    else:
        lines.append("- times in µs per forward. kiln, after its `--check` passed: `kiln run --bench N` (kernels "
                     "launched one by one, N forwards on one input set, the mean): a *hot* figure; this run has no "
                     "CUDA-graph figure of kiln, so kiln is compared with PyTorch's hot figures.")
    lines += ["- PyTorch: median over CUDA-graph replays of K iterations; *rot* = rotating over independent "
              "weight+input sets (≥ 3× L2), *hot* = one set repeated. torch.compile (default mode) is timed only if "
              "it matches eager (rel L2 ≤ 1e-5 f32, 2e-2 bf16).",
              *compile_provenance(rows),
              "- floor = max(bytes once / 4.2 TB/s, flops / peak (767 TFLOP/s bf16, 50 TFLOP/s f32)); "
              "% of floor = floor / time.", ""]

    lines += ["## Summary", "",
              f"Speed-up = PyTorch time / kiln time (> 1: kiln faster), both *{b}*; geomean over the cases where both "
              "ran.", "",
              "| dtype | kiln passed | vs | geomean speed-up | kiln faster | best | worst |",
              "|---|---|---|---|---|---|---|"]
    for dtype in dtypes:
        s = summary_stats(rows, dtype, b)
        for side, label in SIDES.items():
            if side not in s:
                continue
            x = s[side]
            lines.append(f"| {dtype} | {s['kiln_pass']}/{s['cases']} | {label} ({b}) | "
                         f"{ratio(x['geomean'])} | {x['kiln_faster']}/{x['n']} | "
                         f"{x['best'][0]} {ratio(x['best'][1])} | {x['worst'][0]} {ratio(x['worst'][1])} |")
    lines += ["", "What L2 gives (geomean of rotated time / hot time; > 1: the hot figure is flattered):", ""]
    for dtype in dtypes:
        for side, label in [("kiln", "kiln graph"), *SIDES.items()]:
            get = (lambda r, var: kiln_fig(r, var)) if side == "kiln" else (lambda r, var, s=side: torch_ms(r, s, var))
            g = geomean([div(get(r, "rotated"), get(r, "hot")) for r in rows if r["dtype"] == dtype])
            if g:
                lines.append(f"- {dtype} {label}: {ratio(g)}")
    lines.append("")

    lines += memory_bound_section(rows, b, kiln_label(rows, b))
    lines += memory_bound_bar_section(rows)

    for dtype in dtypes:
        head = ["case", "floor", "bound", "kiln rot", "kiln hot", *(["kiln launched"] if launch_too else []),
                "kernels", "eager rot", "eager hot", "compile rot", "compile hot", "kiln % floor",
                "eager % floor", "compile % floor", "eager / kiln", "compile / kiln", "notes"]
        lines += [f"## {dtype}", "", f"% of floor and the ratios on the *{b}* figures.", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in (r for r in rows if r["dtype"] == dtype):
            k = kiln_ms(r, b)
            floor = r["floor_ms"]
            e, c = torch_ms(r, "eager", b), torch_ms(r, "torch_compile", b)
            cells = [r["case"], us(floor), r["floor_bound"], us(kiln_fig(r, "rotated")),
                     us(kiln_fig(r, "hot") or (None if launch_too else kiln_fig(r, "launch"))),
                     *([us(kiln_fig(r, "launch"))] if launch_too else []),
                     str((r.get("kiln") or {}).get("kernels") or "–"),
                     us(torch_ms(r, "eager", "rotated")), us(torch_ms(r, "eager", "hot")),
                     us(torch_ms(r, "torch_compile", "rotated")), us(torch_ms(r, "torch_compile", "hot")),
                     pct(div(floor, k)), pct(div(floor, e)), pct(div(floor, c)),
                     ratio(div(e, k)), ratio(div(c, k)), kiln_note(r)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")

    timed = sorted((r for r in rows if kiln_ms(r, b)), key=lambda r: r["floor_ms"] / kiln_ms(r, b))
    if timed:
        lines += [f"## Furthest from the floor (kiln, {b})", "",
                  "| case | dtype | bound | kiln | floor | % of floor | eager % of floor |", "|---|---|---|---|---|---|---|"]
        for r in timed[:12]:
            e = torch_ms(r, "eager", b)
            lines.append(f"| {r['case']} | {r['dtype']} | {r['floor_bound']} | {us(kiln_ms(r, b))} | {us(r['floor_ms'])} | "
                         f"{pct(r['floor_ms'] / kiln_ms(r, b))} | {pct(div(r['floor_ms'], e))} |")
        lines.append("")
    if meta.get("not_run"):
        lines += ["## Not run", "", ", ".join(meta["not_run"]), ""]
    return "\n".join(lines)


def chart(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = basis(rows)
    dtypes = [d for d in ("f32", "bf16") if any(r["dtype"] == d for r in rows)]
    width = max(12, 0.22 * max(sum(1 for r in rows if r["dtype"] == d) for d in dtypes))
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(width, 5.5 * len(dtypes)), squeeze=False)
    series = [("kiln graph (rotated)", lambda r: kiln_fig(r, "rotated"), "o", "tab:red"),
              ("kiln graph (hot)" if kiln_label(rows, "hot") == "kiln graph" else "kiln launched (hot)",
               lambda r: kiln_ms(r, "hot"), "o",
               "lightsalmon"),
              ("eager (rotated)", lambda r: torch_ms(r, "eager", "rotated"), "s", "tab:blue"),
              ("torch.compile (rotated)", lambda r: torch_ms(r, "torch_compile", "rotated"), "^", "tab:green"),
              ("eager (hot)", lambda r: torch_ms(r, "eager", "hot"), "s", "lightsteelblue"),
              ("torch.compile (hot)", lambda r: torch_ms(r, "torch_compile", "hot"), "^", "lightgreen"),
              ("floor", lambda r: r["floor_ms"], "_", "black")]
    for ax, dtype in zip(axes[:, 0], dtypes):
        mine = [r for r in rows if r["dtype"] == dtype]
        xs = list(range(len(mine)))
        for label, get, marker, color in series:
            pts = [(x, get(r) * 1e3) for x, r in zip(xs, mine) if get(r)]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=label,
                           s=60 if marker == "_" else 22, zorder=3 if label.startswith("kiln graph (r") else 2)
        for x in (x for x, r in zip(xs, mine) if not kiln_ms(r, b)):
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
    ap.add_argument("--compile-from", nargs="+", default=[], metavar="JSON",
                    help="earlier results JSON(s) whose torch.compile figures fill the rows that have none")
    ap.add_argument("--no-chart", action="store_true")
    args = ap.parse_args(argv)
    meta, rows = load(args.results, args.compile_from)
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
