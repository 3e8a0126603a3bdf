#!/usr/bin/env bash
# Regenerates the golden IR dumps tests/golden/<model>/<level>.txt from the current compiler:
# builds kiln, then runs the golden tests with KILN_UPDATE_GOLDENS=1, which rewrite the files instead of
# comparing. Review the result with `git diff tests/golden` before committing it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# Start from an empty tree so dumps of models or levels that no longer exist disappear.
find tests/golden -name '*.txt' -delete 2>/dev/null || true
KILN_UPDATE_GOLDENS=1 ./build/kiln_tests --gtest_filter='Golden/*' --gtest_brief=1
# Check the fresh files (and that compilation is deterministic) with a normal run.
./build/kiln_tests --gtest_filter='Golden/*' --gtest_brief=1
find tests/golden -type d -empty -delete
echo "update_goldens: $(find tests/golden -name '*.txt' | wc -l) files in tests/golden; review with: git diff --stat tests/golden"
