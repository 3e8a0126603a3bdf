#!/usr/bin/env python3
"""Writes the first draft of a per-pass IR test (tests/passes/<level>/<pass>.<ext>) from a model the pass changes.

    python3 tests/passes/make_pass_test.py PASS MODEL.pt [--arch sm_90a] [--kiln build/kiln] [--name NAME] [-- KILN_ARGS]

The input is MODEL's IR just before PASS (`kiln compile MODEL --stop-after <the pass before it>`; for a lowering, the
level above's IR after its last pass), the RUN line runs PASS alone on it with `kiln opt`, and the CHECK lines are the
lines the pass adds or changes, in order (every line, for a lowering: trim them to what it decides). The script
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
EXTENSIONS = {"loop": ".lir", "tile": ".tir", "kernel": ".kir"}


def run(cmd, check=True):
    """The command's output; a failure ends the script (or, without `check`, gives None)."""
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 and not check:
        return None
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


def kernel_of(lines, i):
    """The `kernel NAME writes` (Tile, Loop IR) or `kernel NAME grid` (Kernel IR) that heads line i, or None."""
    for line in reversed(lines[: i + 1]):
        if line.startswith("kernel "):
            return " ".join(line.split()[:3]).split("(")[0]
    return None


def schedule_fields(line):
    """`schedule STRATEGY K=V ...` as (strategy, {K: V}), the model's note left out (it quotes predicted times)."""
    text = line.strip()[len("schedule "):].split(' model="')[0]
    strategy, *fields = text.split()
    return strategy, dict(f.split("=", 1) for f in fields)


def decision_checks(before, after):
    """CHECK lines for what changed from `before` to `after`: under a CHECK-LABEL of the kernel, a changed schedule as the
    fields the pass set (in order, other fields skipped by {{.*}}), and other changed or added lines whole, except the
    schedule's describe() comment, which follows from the fields. With no `before` (a lowering), the kernels' headers
    and schedules only (Tile IR) or launch lines only (Kernel IR)."""
    old_schedules = {}
    for i, line in enumerate(before):
        if line.strip().startswith("schedule "):
            old_schedules[kernel_of(before, i)] = schedule_fields(line)
    changed = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            changed += range(j1, j2)
    checks, label = [], None
    for j in changed:
        line = after[j].strip()
        kernel = kernel_of(after, j)
        if not line or line.startswith("//") or (not before and not (line.startswith("schedule ") or line.startswith("kernel "))):
            continue
        pattern = escape(line.split(' model="')[0].split("  //")[0])  # not the model's predicted times, not origins
        if line.startswith("schedule ") and kernel in old_schedules:
            strategy, fields = schedule_fields(line)
            old_strategy, old = old_schedules[kernel]
            set_ = [f"{k}={v}" for k, v in fields.items() if strategy != old_strategy or old.get(k) != v]
            if not set_:
                continue  # only the model's note changed
            pattern = f"schedule {strategy}" + "".join("{{.*}} " + escape(f) for f in set_)
        if kernel and kernel != label and not line.startswith("kernel "):
            checks.append(f"// CHECK-LABEL: {escape(kernel)}")
            label = kernel
        checks.append(f"// CHECK: {pattern}")
        if line.startswith("kernel "):
            label = kernel
    return checks


def trimmed(text, keep):
    """Tile or Loop IR text cut down to the kernels named in `keep` (`kernel NAME`): the buffers they use (a temp they
    only read becomes an input, one they only write an output) and a return line of the outputs. None where that leaves
    no kernel."""
    blocks = text.rstrip("\n").split("\n\n")
    head, kernels = blocks[0].splitlines(), [b for b in blocks[1:] if b.startswith("kernel ")]
    kernels = [k for k in kernels if " ".join(k.split()[:2]) in keep]
    if not kernels:
        return None
    body = "\n".join(kernels)
    written = {k.split()[3] for k in kernels}
    lines, outputs = [], []
    for line in head:
        m = re.match(r"buffer (.*) : (\S+) (\w+)(.*)$", line)
        if not m:
            lines.append(line)
            continue
        name, kind = m.group(1), m.group(3)
        read = re.search(r"(?<!store )(?<![\w.])" + re.escape(name) + r"\[", body) is not None
        if name not in written and not read:
            continue
        if kind == "temp" and not (name in written and read):
            kind = "output" if name in written else "input"
        if kind == "output":
            outputs.append(name)
        lines.append(f"buffer {name} : {m.group(2)} {kind}{m.group(4)}")
    return "\n".join(lines) + "\n\n" + "\n\n".join(kernels) + "\n\nreturn " + ", ".join(outputs) + "\n"


def run_opt(kiln, out, text, level, pass_name, check=True):
    """`kiln opt` of `text` (a temporary file beside the test) with the one pass."""
    tmp = out.with_suffix(out.suffix + ".input")
    tmp.write_text(text)
    try:
        return run([kiln, "opt", str(tmp), "--level", level, "--passes", pass_name], check)
    finally:
        tmp.unlink()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pass_name")
    ap.add_argument("model")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--kiln", default=str(ROOT / "build" / "kiln"))
    ap.add_argument("--name", help="test file name without extension (default: the pass)")
    ap.add_argument("--keep", help="cut the input to these kernels (comma-separated names), whatever the pass changes")
    ap.add_argument("kiln_args", nargs="*", help="more `kiln compile` arguments (after --)")
    args = ap.parse_args()

    order = pipeline(args.kiln)
    names = [p[0] for p in order]
    if args.pass_name not in names:
        sys.exit(f"make_pass_test: no pass {args.pass_name} (kiln passes lists them)")
    index = names.index(args.pass_name)
    level, description = order[index][1], order[index][2]
    # A lowering (the first pass of its level) reads the level above: its input is that level's IR after its last pass.
    input_level = order[index - 1][1] if index > 0 else None
    if level not in EXTENSIONS or input_level not in EXTENSIONS:
        sys.exit(f"make_pass_test: {args.pass_name} reads no IR kiln opt parses (loop, tile or kernel)")
    previous = names[index - 1]

    compile_ = [args.kiln, "compile", args.model, "--arch", args.arch, *args.kiln_args]
    before = run(compile_ + ["--ir", input_level, "--stop-after", previous])
    after = run(compile_ + ["--ir", level, "--stop-after", args.pass_name])
    if before == after:
        sys.exit(f"make_pass_test: {args.pass_name} changes nothing on {args.model}; pick a model it applies to")

    out = ROOT / "tests" / "passes" / level / f"{args.name or args.pass_name}{EXTENSIONS[input_level]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    opt = lambda text: run_opt(args.kiln, out, text, input_level, args.pass_name)  # noqa: E731
    body = lambda text: [l for l in text.splitlines() if not l.startswith("//")]  # noqa: E731
    if body(opt(before)) != body(after):
        diff = "\n".join(difflib.unified_diff(body(after), body(opt(before)), "pipeline", "kiln opt", lineterm="", n=1))
        sys.exit(f"make_pass_test: kiln opt and the pipeline disagree after {args.pass_name}:\n{diff}")
    cut = False
    if args.keep:  # the test is what the pass does on these kernels alone
        small = trimmed(before, {f"kernel {k}" for k in args.keep.split(",")})
        if not small:
            sys.exit(f"make_pass_test: --keep {args.keep} names no kernel of the input")
        before, after, cut = small, opt(small), True
    checks = decision_checks(body(before) if input_level == level else [], body(after))

    # Otherwise the input cut to the kernels the pass changed, where the pass decides the same on them alone.
    keep = {c.split("CHECK-LABEL: ")[1].rsplit(" ", 1)[0] for c in checks if "CHECK-LABEL: " in c}
    small = trimmed(before, keep) if not cut and input_level == level and input_level != "kernel" else None
    small_after = small and run_opt(args.kiln, out, small, input_level, args.pass_name, check=False)
    if small_after and decision_checks(body(small), body(small_after)) == checks:
        before, cut = small, True
    model = pathlib.Path(args.model).name
    header = [f"// {args.pass_name}: {description}",
              f"// Input: {model}'s {input_level} IR after {previous} (--arch {args.arch}"
              f"{' ' + ' '.join(args.kiln_args) if args.kiln_args else ''})"
              f"{(f', cut to kernels {args.keep}' if args.keep else ', cut to the kernels the pass changes') if cut else ''}.",
              f"// RUN: kiln opt %s --level {input_level} --passes {args.pass_name} | FileCheck %s"]
    out.write_text("\n".join(header + checks) + "\n\n" + before)
    print(f"wrote {out.relative_to(ROOT)}: {len(checks)} CHECK lines; review and trim it")


if __name__ == "__main__":
    main()
