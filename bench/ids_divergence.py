"""Where two `kiln generate` runs of one prompt part ways, and how close the pick was (bench/decode_contexts.sh).

    python3 bench/ids_divergence.py OLD.ids NEW.ids PROMPT_TOKENS OLD_LOGITS_DIR NEW_LOGITS_DIR

The ids files are `kiln generate`'s stdout (the prompt and the new ids, comma-separated), the logits directories its
--save-logits output (logits<i>.bin: the raw f32 logits new token i was chosen from). Prints the first new token where
the two differ and, for each run, its two largest logits there and what it gave the other run's pick: a difference
where each run's top two lie within bf16 rounding of each other is a near tie, not a wrong result.
"""
import pathlib
import sys

import numpy as np


def main():
    old, new = (pathlib.Path(p).read_text().strip().split(",") for p in sys.argv[1:3])
    prompt = int(sys.argv[3])
    dirs = [pathlib.Path(p) for p in sys.argv[4:6]]
    first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), None)
    if first is None:
        print("same ids")
        return
    step = first - prompt
    print(f"first difference at new token {step} (ids {old[first]} and {new[first]})")
    for name, d, mine, other in (("old", dirs[0], old[first], new[first]), ("new", dirs[1], new[first], old[first])):
        logits = np.fromfile(d / f"logits{step}.bin", dtype=np.float32)
        top = np.sort(logits)[-2:]
        print(f"  {name}: top two {top[1]:.5f} {top[0]:.5f} (gap {top[1] - top[0]:.5f}); its pick {mine} "
              f"{logits[int(mine)]:.5f}, the other's {other} {logits[int(other)]:.5f}")


if __name__ == "__main__":
    main()
