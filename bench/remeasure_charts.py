"""Two charts for README from one re-measurement (issue 49): the suite's rows sorted by eager / kiln, and the
whole model's ms per config as bars.

    python3 bench/remeasure_charts.py --suite SUITE.json [more.json ...] --model MODEL.json -o PREFIX

writes PREFIX-suite-ratio.png and PREFIX-model.png (needs matplotlib). Ratios are PyTorch eager time / kiln time on
the rotated figures (kiln from one CUDA graph over copies of its arena; eager from CUDA-graph replays over rotated
sets), > 1: kiln faster; rows kiln did not time are left out and the title says how many are shown.
"""
import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KIND_GROUPS = {"rmsnorm": "memory-bound", "softmax": "memory-bound", "silu_mul": "memory-bound",
               "sdpa_causal_gqa": "attention", "attention_naive": "attention"}
COLORS = {"matrix product": "tab:blue", "memory-bound": "tab:green", "attention": "tab:purple"}


def suite_chart(paths, out):
    rows = [r for p in paths for r in json.loads(pathlib.Path(p).read_text())["results"]]
    fig, axes = plt.subplots(1, 2, figsize=(16, 6), sharey=True)
    for ax, dtype in zip(axes, ("bf16", "f32")):
        pts = []
        for r in rows:
            k, e = (r.get("kiln") or {}).get("graph_rotated"), (r.get("eager") or {}).get("rotated")
            if r["dtype"] == dtype and k and e and k.get("ms") and e.get("ms"):
                pts.append((e["ms"] / k["ms"], r["case"], KIND_GROUPS.get(r["kind"], "matrix product")))
        pts.sort()
        ax.bar(range(len(pts)), [p[0] for p in pts], color=[COLORS[p[2]] for p in pts])
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(pts)))
        ax.set_xticklabels([p[1] for p in pts], rotation=90, fontsize=5)
        ax.set_title(f"{dtype}: eager / kiln, rotated ({len(pts)} rows; > 1: kiln faster)")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    for name, c in COLORS.items():
        axes[0].bar([0], [0], color=c, label=name)
    axes[0].legend(fontsize=8, loc="upper left")
    axes[0].set_ylabel("eager time / kiln time (log)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def model_chart(path, out):
    rows = json.loads(pathlib.Path(path).read_text())["results"]
    series = [("kiln launched", lambda r: (r.get("kiln") or {}).get("ms"), "tab:red"),
              ("kiln graph", lambda r: ((r.get("kiln") or {}).get("graph") or {}).get("ms"), "darkred"),
              ("eager", lambda r: (r.get("eager") or {}).get("ms"), "tab:blue"),
              ("torch.compile reduce-overhead", lambda r: (r.get("compile_reduce_overhead") or {}).get("ms"), "tab:green"),
              ("floor", lambda r: r.get("floor_ms"), "grey")]
    fig, ax = plt.subplots(figsize=(10, 5))
    w = 0.8 / len(series)
    for i, (label, get, color) in enumerate(series):
        for x, r in enumerate(rows):
            v = get(r)
            if v:
                ax.bar(x + (i - len(series) / 2 + 0.5) * w, v, w, color=color, label=label if x == 0 or label not in
                       ax.get_legend_handles_labels()[1] else None)
                ax.text(x + (i - len(series) / 2 + 0.5) * w, v, f"{v:.2f}", ha="center", va="bottom", fontsize=6)
            elif label.startswith("torch"):
                ax.text(x + (i - len(series) / 2 + 0.5) * w, 0.6, "not timed", ha="center", rotation=90, fontsize=6)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r['config']} ({(r.get('kiln') or {}).get('check', '?')})" for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("ms per forward (log)")
    ax.set_title("TinyLlama-shaped transformers Llama on the H200 (kiln check in brackets)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", nargs="+", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("-o", "--prefix", required=True)
    args = ap.parse_args()
    suite_chart(args.suite, f"{args.prefix}-suite-ratio.png")
    model_chart(args.model, f"{args.prefix}-model.png")
    print(f"wrote {args.prefix}-suite-ratio.png, {args.prefix}-model.png")


if __name__ == "__main__":
    main()
