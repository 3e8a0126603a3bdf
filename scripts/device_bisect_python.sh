#!/usr/bin/env bash
# On the GPU machine: the GPU paths of `kiln run --check --bisect` and of the Python package (issue 53), which the CPU
# tests cannot run. Builds kiln and libkiln_runtime.so, then
#   1. `kiln run --check --bisect -v` on mlp with kernel k1 perturbed (KILN_TEST_PERTURB_KERNEL: the bisect must name
#      k1_reduce_sum and pass k0), and on hf_llama_tiny and hf_mixtral_tiny_grouped unperturbed (every compared output
#      must agree);
#   2. `pip install ./python` into a venv seeing this machine's torch, then kiln.compile of the tiny Llama on the GPU
#      (CUDA ids in, CUDA logits out through the C API) against the module on the GPU, and kiln.generate on the GPU
#      against transformers' generate (f32 ids).
# KILN_BISECT=0 runs part 2 alone. $OUT gets bisect_python.txt (printed last) and its logs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/bisect-python-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH KILN_CACHE_DIR=$(mktemp -d)
report=$OUT/bisect_python.txt
{ bash scripts/device_build.sh "$OUT/build.log" && cmake --build build --target kiln_runtime_shared >> "$OUT/build.log" 2>&1; } ||
  { echo "build failed" > "$report"; tail -20 "$OUT/build.log" >> "$report"; cat "$report"; exit 1; }
bisect() {  # NAME MODEL [PERTURBED KERNEL]
  KILN_TEST_PERTURB_KERNEL=${3:-} ./build/kiln run "$2" --check --bisect -v > "$OUT/bisect-$1.log" 2>&1
  echo "kiln run --check --bisect $1 ${3:+(perturbed $3)}: rc=$?; $(grep -a 'kiln: bisect:' "$OUT/bisect-$1.log" | tail -1)" >> "$report"
}
echo "## kiln run --check --bisect on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" > "$report"
if [ "${KILN_BISECT:-1}" = 1 ]; then  # KILN_BISECT=0: the Python package alone
  bisect mlp models/fixtures/mlp.pt k1_reduce_sum
  bisect hf_llama_tiny models/fixtures/hf_llama_tiny.pt
  bisect hf_mixtral_tiny_grouped models/fixtures/hf_mixtral_tiny_grouped.pt
fi
echo "## the Python package on the GPU" >> "$report"
venv=$(mktemp -d)/venv
cp -r python "$(dirname "$venv")/source"  # setuptools writes its egg-info beside the sources: not into the tree
# The GPU machine's torch lives in a venv of its own, whose packages --system-site-packages does not reach (that is the
# base interpreter's): the new venv also reads the site-packages of the python3 that made it, through a .pth file.
python3 -m venv --system-site-packages "$venv" &&
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kiln_parent_site.pth" &&
  "$venv/bin/pip" install -q --no-deps --no-build-isolation "$(dirname "$venv")/source" \
  > "$OUT/pip.log" 2>&1 || echo "pip install failed (pip.log)" >> "$report"
(cd /tmp && KILN_BINARY=$OLDPWD/build/kiln "$venv/bin/python" - "$OLDPWD" > "$OUT/python.log" 2>&1 <<'PY'
import sys, torch, kiln
sys.path.insert(0, sys.argv[1] + "/models")
import hf_llama
model = hf_llama.build("tiny").cuda()
ids = torch.randint(0, 256, (1, 16), device="cuda")
compiled = kiln.compile(model, (ids,))
with torch.no_grad():
    want = model(ids)
got = compiled(ids)
err = ((got.double() - want.double()).norm() / want.double().norm()).item()
print(f"kiln.compile on the GPU: logits {list(got.shape)} on {got.device}, rel_l2 {err:.2e} against the module on the GPU: "
      f"{'PASS' if got.is_cuda and err < 1e-5 else 'FAIL'}")
hf = hf_llama.build("tiny").model
ids = kiln.generate(hf, [5, 17, 42], max_new_tokens=8)
with torch.no_grad():
    want = hf.generate(torch.tensor([[5, 17, 42]]), max_new_tokens=8, min_new_tokens=8, do_sample=False,
                       attention_mask=torch.ones(1, 3, dtype=torch.long))[0].tolist()
print(f"kiln.generate on the GPU: {ids} {'PASS' if ids == want else 'FAIL, transformers: ' + str(want)}")
PY
) ; echo "python rc=$?" >> "$report"
grep -E "PASS|FAIL|Error|error" "$OUT/python.log" | tail -5 >> "$report"
cat "$report"
