#!/usr/bin/env bash
# GPU check: the five workloads on CUDA for every backend that can run on this machine.
# Run from the repository root on a machine with an NVIDIA GPU and PyTorch with CUDA.
# Works offline: wheels placed in .whl/ (e.g. iree-base-runtime, onnxruntime-gpu) are
# installed from there; the project itself is used from the checkout (PYTHONPATH), so
# the pinned CPU torch of pyproject.toml is never pulled in. Prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/dlcompare-site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/dlcompare-site"
fi
python3 -m pip install -q --no-index pandas tabulate rich matplotlib 2>/dev/null || true

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader || true
python3 -m compare list --device cuda
OUT="${OUT:-reports}/gpu-check"
python3 -m compare --device cuda --backends "${BACKENDS:-inductor,ort,tvm-untuned,iree}" --size default \
    --time-budget 3 --min-samples 10 --timeout 240 --no-history --output-dir "$OUT" --quiet
status=$?
echo
cat "$OUT/summary.md"
exit $status
