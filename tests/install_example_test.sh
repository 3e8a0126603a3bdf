#!/usr/bin/env bash
# CTest: the installed package works for a user. Installs the build tree into a temporary prefix, builds
# examples/run_emitted (C++) and examples/run_emitted_c (C) against that prefix only (find_package(kiln) ->
# kiln::runtime), checks that the shared library exports only kiln's symbols and needs no libfmt, emits the mlp fixture
# with the installed kiln (nvcc included) and runs the examples on it. Without a GPU the example must get as far as the manifest and then say
# clearly that there is no driver (exit 1); with one it must print a checksum per output.
#   install_example_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
# On failure, say which command failed and show what the steps wrote, before the temporary directory goes.
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "install_example_test: failed (exit $rc) at: $BASH_COMMAND";
      for f in "$work"/*.log "$work"/*.out "$work"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done; fi
      rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" 2>&1
for f in bin/kiln include/kiln/kiln_runtime.h lib/cmake/kiln/kilnConfig.cmake; do
  [ -e "$work/prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
ls "$work/prefix"/lib*/libkiln_runtime.so > /dev/null && ls "$work/prefix"/lib*/libkiln_runtime.a > /dev/null
generator=(); command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$src/examples/run_emitted" -B "$work/example" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/example" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
# The example links the installed library, not the build tree's.
# (ldd into a file first: `ldd | grep -q` under pipefail fails whenever grep exits before ldd has written everything)
ldd "$work/example/run_emitted" > "$work/ldd.out"
grep -q "$work/prefix" "$work/ldd.out"
# The shared library exports kiln's API alone (cmake/kiln_runtime.map) and needs no fmt at run time.
lib=$(ls "$work/prefix"/lib*/libkiln_runtime.so)
nm -D --defined-only "$lib" | awk '{print $3}' | c++filt > "$work/symbols.out"
grep -vE '^(kiln::|kiln_|typeinfo for kiln::|typeinfo name for kiln::|vtable for kiln::)' "$work/symbols.out" \
  > "$work/foreign-symbols.out" || true
[ ! -s "$work/foreign-symbols.out" ] || { echo "exported symbols that are not kiln's:"; head "$work/foreign-symbols.out"; exit 1; }
grep -q '^kiln_runtime_run$' "$work/symbols.out" && grep -q '^kiln::Runtime::run' "$work/symbols.out"
readelf -d "$lib" > "$work/needed.out"
if grep -q 'NEEDED.*libfmt' "$work/needed.out"; then echo "libkiln_runtime.so needs libfmt at run time"; exit 1; fi
# The C example, built as C against the same prefix.
cmake -S "$src/examples/run_emitted_c" -B "$work/example-c" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  > "$work/configure-c.log" 2>&1 || { cat "$work/configure-c.log"; exit 1; }
cmake --build "$work/example-c" > "$work/build-c.log" 2>&1 || { cat "$work/build-c.log"; exit 1; }
"$work/prefix/bin/kiln" compile "$src/models/fixtures/mlp.pt" --emit cuda -o "$work/out" > "$work/emit.log" 2>&1
set +e
"$work/example-c/run_emitted_c" "$work/out" > "$work/run-c.out" 2> "$work/run-c.err"
rc_c=$?
set -e
cat "$work/run-c.out" "$work/run-c.err"
grep -q "^mlp for sm_90a (runtime [0-9.]*): 1 inputs, 1 outputs" "$work/run-c.out"
grep -q "^input 0 'x' f32, 2048 bytes" "$work/run-c.out"
if [ $rc_c -ne 0 ]; then
  [ $rc_c -eq 1 ] && grep -q "^run_emitted_c: kiln_model_open: kiln runtime: cannot run .* on a GPU: .*(no-device)$" "$work/run-c.err"
fi
# With kiln's stub driver (build/stub_cuda/libcuda.so.1: the kernels of real cubins do nothing there) the C program
# runs all the way through the installed library: model, session, run, the outputs (the zeroed arena's) checksummed.
LD_LIBRARY_PATH="$build/stub_cuda" "$work/example-c/run_emitted_c" "$work/out" > "$work/run-c-stub.out" 2>&1
cat "$work/run-c-stub.out"; grep -q "^output 0 'out0' f32: 2048 bytes, fnv1a " "$work/run-c-stub.out"
set +e
"$work/example/run_emitted" "$work/out" 3 > "$work/run.out" 2> "$work/run.err"
rc=$?
set -e
cat "$work/run.out" "$work/run.err"
grep -q "^mlp: 2 kernels for sm_90a, 1 inputs, 1 outputs" "$work/run.out"
if [ $rc -eq 0 ]; then
  grep -q "^output 0 'out0' f32: 2048 bytes, fnv1a " "$work/run.out"
  # On a GPU: kernel by kernel with a synchronization after each gives the same bytes as the graph replay.
  KILN_SYNC_EACH_KERNEL=1 "$work/example/run_emitted" "$work/out" 3 > "$work/run-sync.out"
  cmp "$work/run.out" "$work/run-sync.out"
  # Fed the inputs `kiln run DIR` used, the example reproduces kiln's output bytes.
  "$work/prefix/bin/kiln" run "$work/out" --save-io "$work/io" > "$work/kiln.out"
  "$work/example/run_emitted" "$work/out" "$work/io" > "$work/run-io.out"
  want=$(grep -o 'fnv1a [0-9a-f]*' "$work/kiln.out"); got=$(grep -o 'fnv1a [0-9a-f]*' "$work/run-io.out")
  [ -n "$want" ] && [ "$want" = "$got" ] || { echo "kiln: $want, example: $got"; exit 1; }
  "$work/example-c/run_emitted_c" "$work/out" "$work/io" > "$work/run-c-io.out"
  got_c=$(grep -o 'fnv1a [0-9a-f]*' "$work/run-c-io.out")
  [ "$want" = "$got_c" ] || { echo "kiln: $want, C example: $got_c"; exit 1; }
else
  [ $rc -eq 1 ] && grep -q "^run_emitted: kiln runtime: cannot run .* on a GPU: " "$work/run.err"
fi
echo "install_example_test: OK"
