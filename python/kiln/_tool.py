"""Finding and running the kiln executable."""
import os
import pathlib
import shutil
import subprocess


class KilnError(RuntimeError):
    """kiln refused or failed: the message is kiln's one line (what, where in the model, how to fix)."""


def kiln_binary():
    """$KILN_BINARY, else `kiln` on PATH; KilnError naming both when neither is there."""
    path = os.environ.get("KILN_BINARY") or shutil.which("kiln")
    if not path or not pathlib.Path(path).is_file():
        raise KilnError("the kiln executable was not found: build kiln (scripts/setup.sh) and set KILN_BINARY to "
                        "build/kiln, or put it on PATH")
    return path


def run_kiln(args):
    """Runs `kiln ARGS...` and returns its stdout; KilnError with kiln's error line when it exits non-zero."""
    done = subprocess.run([kiln_binary(), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.startswith("kiln: error:")]
        message = lines[-1] if lines else (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise KilnError(message.removeprefix("kiln: error: "))
    return done.stdout
