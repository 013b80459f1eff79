#!/usr/bin/env bash
# GPU check: the survey's protocol and the other suites on CUDA, in parts, each cut off at
# its own time limit, the whole within a short GPU slot (8 minutes by default).
# Run from the repository root on a machine with an NVIDIA GPU and PyTorch with CUDA.
# Works offline: wheels placed in .whl/ (e.g. iree-base-runtime, onnxruntime-gpu) are
# installed from there; the project itself is used from the checkout (PYTHONPATH), so
# the pinned CPU torch of pyproject.toml is never pulled in.
#
# A part that reaches its limit gets SIGTERM: compare saves the cells it finished and
# writes its reports (exit 143), and the next part starts. parts.txt says how each ended.
#
#   DEVICE    cuda (cpu tries the script without a GPU, as the tests do)
#   SIZE      workload size (empty: the device's default, large on CUDA)
#   BACKENDS  compared with eager (Inductor in its default mode and with CUDA graphs)
#   LIMITS    seconds for: the listing, the survey (paper), the model suite, the LLM suite
#             (0 skips a part)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/dlcompare-site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/dlcompare-site"
fi
python3 -m pip install -q --no-index pandas tabulate rich matplotlib 2>/dev/null || true

DEVICE="${DEVICE:-cuda}"
SIZE="${SIZE:-}"
BACKENDS="${BACKENDS:-inductor,inductor:inductor-mode=reduce-overhead,xla,iree,tvm-untuned,ort}"
read -r T_LIST T_PAPER T_MODELS T_LLM <<< "${LIMITS:-30 270 90 90}"
OUT="${OUT:-reports}/gpu-check"
mkdir -p "$OUT"
: > "$OUT/parts.txt"
# One process per cell and a short sampling budget: a GPU's spread is small (eager's IQR/2
# was 0.1-0.3 % on an H200 at the large size), and the slot is short.
COMMON=(--device "$DEVICE" ${SIZE:+--size "$SIZE"} --processes 1 --reference-processes 1 --time-budget 2
        --timeout 120 --noise-probe 0 --no-history --quiet)

part() {  # part NAME LIMIT_S ARGS...: one compare command, cut off at its limit
    local name=$1 limit=$2 start rc how
    shift 2
    if [ "$limit" -le 0 ]; then
        echo "part $name: skipped (limit 0)" | tee -a "$OUT/parts.txt"
        return 0
    fi
    start=$(date +%s)
    timeout -s TERM -k 30 "$limit" python3 -m compare "$@"
    rc=$?
    case $rc in
        0) how="finished" ;;
        124|143) how="cut off at its limit: finished cells saved" ;;
        *) how="failed (exit $rc)" ;;
    esac
    echo "part $name: $how after $(( $(date +%s) - start )) s of $limit s" | tee -a "$OUT/parts.txt"
}

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null || true
part list "$T_LIST" list --device "$DEVICE"
part survey "$T_PAPER" paper --backends "$BACKENDS" --dynamic-sizes 3 --dynamic-calls 20 \
    "${COMMON[@]}" --output-dir "$OUT/survey"
part models "$T_MODELS" --suite models --backends "inductor,inductor:inductor-mode=reduce-overhead" \
    "${COMMON[@]}" --output-dir "$OUT/models"
part llm "$T_LLM" --suite llm --backends inductor "${COMMON[@]}" --output-dir "$OUT/llm"

echo
cat "$OUT/parts.txt"
for name in survey models llm; do
    if [ -f "$OUT/$name/summary.md" ]; then
        echo
        echo "# $name"
        cat "$OUT/$name/summary.md"
    fi
done
