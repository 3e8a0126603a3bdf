# lit configuration of kiln's per-pass IR tests (tests/README.md, "Pass tests"): each file under tests/passes/<level>/
# is a small IR input whose RUN lines run `kiln opt` on it and whose CHECK lines FileCheck matches against the output.
# ctest runs them (Passes.Lit: `python3 -m lit -v tests/passes --param kiln=build/kiln`).
import os
import shutil
import sys

import lit.formats

config.name = "kiln passes"
# lit's own shell: `not`, pipes and `2>&1` behave the same on every machine.
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".lir", ".tir", ".kir"]  # Loop, Tile and Kernel IR inputs
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(config.test_source_root))
build = lit_config.params.get("build", os.path.join(root, "build"))
# lit's Output/ folders (the %t files) go to the build tree, not next to the tests.
config.test_exec_root = os.path.join(build, "tests", "passes")

kiln = lit_config.params.get("kiln", os.path.join(build, "kiln"))
if not os.path.exists(kiln):
    lit_config.fatal(f"no kiln binary at {kiln}: build it (scripts/build.sh) or pass --param kiln=PATH")
filecheck = shutil.which("filecheck") or f"{sys.executable} -m filecheck"
config.substitutions.append((r"\bkiln\b", kiln))
config.substitutions.append((r"\bFileCheck\b", filecheck))
