#!/usr/bin/env bash
# On the GPU machine: builds the kiln executable from source for the device scripts. build/ does not travel with
# the tree, but a warm machine keeps the build/ of an earlier call: that one is reused (incremental build), any
# other build/ (e.g. copied from a machine with other libraries) is removed first. Log: $1 (default build.log).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
log=${1:-build.log}
if [ ! -f build/.built-on-device ]; then rm -rf build; fi
KILN_TARGET=kiln KILN_JOBS=$(nproc) bash scripts/build.sh > "$log" 2>&1 || { tail -30 "$log"; exit 1; }
touch build/.built-on-device
