#!/usr/bin/env bash
# The Python package as a user installs it (issue 53 item 2): `pip install ./python` into a fresh virtual environment,
# then tests/python/package_check.py imports the installed `kiln` (not python/kiln: it runs outside the repository).
# The environment sees this machine's site-packages (torch and transformers are never downloaded here); the package has
# no dependency to fetch. Usage: package_test.sh KILN_BINARY
set -euo pipefail
kiln=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv --system-site-packages "$tmp/venv"
cp -r "$root/python" "$tmp/source"  # setuptools writes its egg-info beside the sources: not into the repository
"$tmp/venv/bin/pip" install --quiet --no-deps --no-build-isolation --disable-pip-version-check "$tmp/source" \
  > "$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
cd "$tmp"
KILN_BINARY=$kiln "$tmp/venv/bin/python" "$root/tests/python/package_check.py" "$root"
