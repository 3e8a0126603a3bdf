"""Markdown tables from whole-model results (bench/whole_model.py).

    python3 bench/summarize_model.py bench/results/2026-11-30-h200-model.json [more.json ...] [-o PREFIX]

writes PREFIX.md (PREFIX defaults to the first JSON's path without .json). Several JSONs (parts of one run
split over device calls) are merged; a later file's row for a config replaces an earlier one's.
"""
import argparse
import json
import pathlib

SIDES = [("eager", "eager"), ("compile", "torch.compile"), ("compile_reduce_overhead", "reduce-overhead")]


def load(paths):
    metas, rows = [], {}
    for p in paths:
        data = json.loads(pathlib.Path(p).read_text())
        metas.append(data["meta"])
        for r in data["results"]:
            rows[r["config"]] = r
    order = {"bf16": 0, "f32": 1}
    return metas, sorted(rows.values(), key=lambda r: (order.get(r["dtype"], 9), -r["batch"] * r["seq"]))


def ms(x):
    return "–" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def side_ms(row, side):
    return row.get(side, {}).get("ms")


def side_cell(row, side):
    entry = row.get(side, {})
    if entry.get("ms") is not None:
        return ms(entry["ms"])
    if entry.get("check") == "FAIL":
        return f"not timed: rel L2 vs eager {entry['rel_l2_vs_eager']:.2e}"
    return entry.get("error", "–")


def kiln_cell(row):
    k = row.get("kiln", {})
    if k.get("ms") is not None:
        return ms(k["ms"])
    if k.get("check") == "FAIL":
        return f"not timed: check FAIL, rel L2 {k.get('rel_l2', float('nan')):.3e}"
    return k.get("error") or row.get("error") or "–"


def markdown(metas, rows, names):
    v = metas[0]["versions"]
    out = [f"# kiln whole-model latency on the H200 — {v['date_utc'][:10]}", "",
           f"- TinyLlama-1.1B-shaped transformers `LlamaForCausalLM` ({metas[0]['preset']} preset: hidden 2048, "
           "intermediate 5632, 22 layers, 32 heads, 4 KV heads, vocab 32000), random weights, no KV cache, "
           "input_ids → logits.",
           f"- torch {v['torch']} (CUDA {v['torch_cuda']}), triton {v.get('triton', '?')}, transformers "
           f"{v.get('transformers', '?')}; GPU {v.get('gpu', '?')}; {v.get('nvcc', '')}; kiln "
           f"{', '.join(sorted({m['versions'].get('kiln_commit') or '?' for m in metas}))}"
           + (" (corrected after the run: the device's copy of .git lagged behind the tree it ran)."
              if any("kiln_commit_seen_on_device" in m["versions"] for m in metas) else " (as recorded on the device)."),
           f"- from {', '.join(names)}.",
           "- ms per forward. kiln: `kiln run --bench N`, mean over N back-to-back forwards launched from C++ (no CUDA "
           "graph), timed only after its `--check` against LibTorch on the same GPU passed. eager / torch.compile "
           "(default, `mode=\"reduce-overhead\"`): `model(input_ids)` from Python, CUDA events around I calls "
           "after warm-up, median of 5; torch.compile is timed only if its logits match eager's at DESIGN.md's "
           "tolerance (rel L2 1e-5 f32, 2e-2 bf16). TF32 off.",
           "- floor = max(bytes / 4.2 TB/s, flops / peak (767 TFLOP/s bf16, 50 TFLOP/s f32)); bytes = every "
           "weight once + logits; % of floor = floor / time.", "",
           "| config | floor | bound | kiln | kiln % floor | eager | torch.compile | reduce-overhead | "
           "eager / kiln | compile / kiln | r-o / kiln | kernels |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        k = r.get("kiln", {}).get("ms")
        ratio = lambda side: "–" if k is None or side_ms(r, side) is None else f"{side_ms(r, side) / k:.3f}×"  # noqa
        out.append(f"| {r['config']} | {ms(r['floor_ms'])} | {r['floor_bound']} | {kiln_cell(r)} | "
                   f"{'–' if k is None else format(100 * r['floor_ms'] / k, '.2g') + '%'} | "
                   + " | ".join(side_cell(r, s) for s, _ in SIDES) + " | "
                   + " | ".join(ratio(s) for s, _ in SIDES) + f" | {r.get('kiln', {}).get('kernels', '–')} |")
    graphed = [r for r in rows if isinstance(r.get("kiln", {}).get("graph"), dict)]
    if graphed:
        out += ["", "kiln replaying its forward from one CUDA graph (`whole_model.py --kiln-graph`):", "",
                "| config | kiln launches | kiln graph |", "|---|---|---|"]
        for r in graphed:
            g = r["kiln"]["graph"]
            out.append(f"| {r['config']} | {ms(r['kiln'].get('ms'))} | {ms(g['ms']) if 'ms' in g else g.get('error')} |")
    profiled = [r for r in rows if r.get("kiln", {}).get("profile", {}).get("rows")]
    for r in profiled:
        p = r["kiln"]["profile"]
        out += ["", f"Where kiln's time goes, {r['config']} (`kiln run --bench 20 --profile`: each kernel alone, hot L2; "
                f"sum {ms(p['sum_ms'])} ms per forward; kernels with the same code are one row):", "",
                "| # | kernel | launches | µs / launch | µs / forward | share | grid × block |", "|---|---|---|---|---|---|---|"]
        for i, k in enumerate(p["rows"][:10]):
            out.append(f"| {i + 1} | {k['kernel']} | {k['launches']} | {k['us_per_launch']:.1f} | "
                       f"{k['us_per_forward']:.1f} | {k['share_pct']:.1f}% | {k['grid_x_block']} |")
    out += ["", "## Correctness and compile time", "",
            "| config | kiln rel L2 vs LibTorch | torch.compile rel L2 vs eager | kiln compile s (cold) | "
            "kiln 2nd run s (cache) | torch.compile first call s | reduce-overhead first call s | trace s |",
            "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        k, c, ro = r.get("kiln", {}), r.get("compile", {}), r.get("compile_reduce_overhead", {})
        rel = k.get("rel_l2")
        crel = c.get("rel_l2_vs_eager")
        second = k.get("second_run_s")
        second_cell = "–" if second is None else f"{second} ({'compiled nothing' if k.get('second_run_compiled_nothing') else 'RECOMPILED'})"
        out.append(f"| {r['config']} | {'–' if rel is None else f'{rel:.3e}'} {k.get('check', '')} | "
                   f"{'–' if crel is None else f'{crel:.3e}'} {c.get('check', '')} | {k.get('compile_s', '–')} | "
                   f"{second_cell} | {c.get('first_call_s', '–')} | {ro.get('first_call_s', '–')} | "
                   f"{r.get('trace_s', '–')} |")
    out += ["", "kiln compile s: its first `kiln run` (every pass from loading the .pt, weights written, nvcc "
            "for the distinct kernels). kiln 2nd run s: the whole second `kiln run --bench N` process (load the "
            "cached cubins and weights, upload, run), which includes the timed forwards."]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("-o", "--prefix", default=None)
    a = ap.parse_args(argv)
    metas, rows = load(a.results)
    prefix = pathlib.Path(a.prefix) if a.prefix else pathlib.Path(a.results[0]).with_suffix("")
    prefix.with_suffix(".md").write_text(markdown(metas, rows, [pathlib.Path(p).name for p in a.results]))
    print(f"wrote {prefix.with_suffix('.md')}")


if __name__ == "__main__":
    main()
