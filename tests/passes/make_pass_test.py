#!/usr/bin/env python3
"""Writes the first draft of a per-pass IR test (tests/passes/<level>/<pass>.<ext>) from a model the pass changes.

    python3 tests/passes/make_pass_test.py PASS MODEL.pt [--arch sm_90a] [--kiln build/kiln] [--name NAME] [-- KILN_ARGS]

The input is MODEL's IR just before PASS (`kiln compile MODEL --stop-after <the pass before it>`), the RUN line runs
PASS alone on it with `kiln opt`, and the CHECK lines are the lines the pass adds or changes, in order. The script
first checks that `kiln opt` on the input gives exactly what the pipeline gives after PASS (a parse that loses
nothing, a pass that depends only on its input), and refuses to write the test otherwise.

A draft, not a verdict: read what the pass should decide, trim the input to the kernels that show it, and keep the
CHECK lines that state the decision (a field the pass sets, a kernel it adds) rather than every changed character.
"""
import argparse
import difflib
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXTENSIONS = {"tile": ".tir", "kernel": ".kir"}


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"make_pass_test: {' '.join(map(str, cmd))} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def pipeline(kiln):
    """[(name, level, description)] in pipeline order, from `kiln passes`."""
    passes = []
    for line in run([kiln, "passes"]).splitlines():
        m = re.match(r"\s*([a-z]+)-([a-z0-9-]+)\s+(.*)", line)
        if m and m.group(1) in ("torch", "tensor", "loop", "tile", "kernel", "cuda"):
            passes.append((f"{m.group(1)}-{m.group(2)}", m.group(1), m.group(3).strip()))
    return passes


def escape(line):
    """A line as a FileCheck pattern: `[[` and `{{` would start a variable or a regex."""
    return line.replace("[[", "{{\\[\\[}}").replace("{{", "{{\\{\\{}}") if ("[[" in line or "{{" in line) else line


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pass_name")
    ap.add_argument("model")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--kiln", default=str(ROOT / "build" / "kiln"))
    ap.add_argument("--name", help="test file name without extension (default: the pass)")
    ap.add_argument("kiln_args", nargs="*", help="more `kiln compile` arguments (after --)")
    args = ap.parse_args()

    order = pipeline(args.kiln)
    names = [p[0] for p in order]
    if args.pass_name not in names:
        sys.exit(f"make_pass_test: no pass {args.pass_name} (kiln passes lists them)")
    index = names.index(args.pass_name)
    level, description = order[index][1], order[index][2]
    if level not in EXTENSIONS or index == 0 or order[index - 1][1] != level:
        sys.exit(f"make_pass_test: {args.pass_name} takes the IR of another level; test it through the lowering's own test")
    previous = names[index - 1]

    compile_ = [args.kiln, "compile", args.model, "--arch", args.arch, "--ir", level, *args.kiln_args]
    before = run(compile_ + ["--stop-after", previous])
    after = run(compile_ + ["--stop-after", args.pass_name])
    if before == after:
        sys.exit(f"make_pass_test: {args.pass_name} changes nothing on {args.model}; pick a model it applies to")

    out = ROOT / "tests" / "passes" / level / f"{args.name or args.pass_name}{EXTENSIONS[level]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".input")
    tmp.write_text(before)
    try:
        opt = run([args.kiln, "opt", str(tmp), "--level", level, "--passes", args.pass_name])
    finally:
        tmp.unlink()
    body = lambda text: [l for l in text.splitlines() if not l.startswith("//")]  # noqa: E731
    if body(opt) != body(after):
        diff = "\n".join(difflib.unified_diff(body(after), body(opt), "pipeline", "kiln opt", lineterm="", n=1))
        sys.exit(f"make_pass_test: kiln opt and the pipeline disagree after {args.pass_name}:\n{diff}")

    checks = []
    matcher = difflib.SequenceMatcher(a=body(before), b=body(after), autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            checks += [f"// CHECK: {escape(l.strip())}" for l in body(after)[j1:j2] if l.strip()]
    model = pathlib.Path(args.model).name
    header = [f"// {args.pass_name}: {description}",
              f"// Input: {model}'s {level} IR after {previous} (--arch {args.arch}"
              f"{' ' + ' '.join(args.kiln_args) if args.kiln_args else ''}).",
              f"// RUN: kiln opt %s --level {level} --passes {args.pass_name} | FileCheck %s"]
    out.write_text("\n".join(header + checks) + "\n\n" + before)
    print(f"wrote {out.relative_to(ROOT)}: {len(checks)} CHECK lines; review and trim it")


if __name__ == "__main__":
    main()
