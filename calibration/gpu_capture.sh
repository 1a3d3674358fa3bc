#!/usr/bin/env bash
# Captures whole-step timings on one GPU (H200) for llama-3.1-8b and qwen3-8b: the full reference
# grid, eager and CUDA graph, BF16, warm-up 2, repeats 5. Run from the repo root:
#
#   OUT=/some/folder bash calibration/gpu_capture.sh
#
# Writes $OUT/capture.log, $OUT/device.csv (the device's measured ceilings, one run per model),
# $OUT/<model>/timings.csv and meta.json, and, when the H200 reference is found
# (shared/reference/h200/steps.csv or ../shared/...), $OUT/<model>/compare.csv, its summary in the
# log: at most 8 files, two folders deep.
#
# Time: each model stops taking new shapes after CAPTURE_BUDGET_S seconds (default 170), so the
# script ends in about 2 x (budget + ~25 s start-up) at worst, under 7 minutes; the full grid is
# expected to take 60-90 s per model (the reference medians sum to ~3.8 s eager and ~2.6 s graph per
# model, x7 runs each, plus one capture per shape).
#
# CAPTURE_SMOKE=1: a ~1-2 minute check first (the GPU tests of tests/test_calibration.py, then each
# model on the full grid's smallest and largest shapes, eager + graph, 1 warm-up, 1 repeat).
# CALIBRATION_DRY_RUN=1 runs the same steps on CPU (--quick, tiny models, no CUDA graphs) to test
# this script where there is no GPU. CAPTURE_MODELS="a b" replaces the model list (preset names or
# config.json paths); CAPTURE_REPEATS / CAPTURE_WARMUP override 5 / 2.
set -euo pipefail
export PYTHONUNBUFFERED=1
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}."

OUT="${OUT:?set OUT to the output folder}"
PY="${PYTHON:-python3}"
BUDGET_S="${CAPTURE_BUDGET_S:-170}"
DRY_RUN="${CALIBRATION_DRY_RUN:-0}"
SMOKE="${CAPTURE_SMOKE:-0}"
if [[ "$SMOKE" == "1" ]]; then
  REPEATS="${CAPTURE_REPEATS:-1}"; WARMUP="${CAPTURE_WARMUP:-1}"
else
  REPEATS="${CAPTURE_REPEATS:-5}"; WARMUP="${CAPTURE_WARMUP:-2}"
fi

mkdir -p "$OUT"

print_versions() {
  echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi || echo "nvidia-smi failed (exit $?)"
  else
    echo "nvidia-smi not found"
  fi
  "$PY" -c 'import importlib.metadata, sys, torch, numpy
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "numpy", numpy.__version__, "click", importlib.metadata.version("click"))
print("cuda available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
}

# Model arguments: CAPTURE_MODELS if set; preset names on the GPU; in a dry run tiny-llama and a
# tiny Qwen3-style config.
model_list() {
  if [[ -n "${CAPTURE_MODELS:-}" ]]; then
    echo "$CAPTURE_MODELS"
  elif [[ "$DRY_RUN" == "1" ]]; then
    local dir="$OUT/.dry-run-models/tiny-qwen3"
    mkdir -p "$dir"
    cat >"$dir/config.json" <<'JSON'
{"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 256, "vocab_size": 1024,
 "max_position_embeddings": 4096}
JSON
    echo "tiny-llama $dir/config.json"
  else
    echo "llama-3.1-8b qwen3-8b"
  fi
}

calibrate_args() {
  if [[ "$DRY_RUN" == "1" ]]; then
    echo "--device cpu --dtype fp32 --quick --cuda-graph off"
  elif [[ "$SMOKE" == "1" ]]; then
    echo "--device cuda --dtype bf16 --cuda-graph all --preflight"
  else
    echo "--device cuda --dtype bf16 --cuda-graph all"
  fi
}

reference_steps() {
  local p
  for p in shared/reference/h200/steps.csv ../shared/reference/h200/steps.csv; do
    if [[ -f "$p" ]]; then echo "$p"; return 0; fi
  done
  return 0
}

# Reference model to compare with: the model itself; in a dry run, llama-3.1-8b (shapes overlap).
reference_model() {
  if [[ "$DRY_RUN" == "1" ]]; then echo "llama-3.1-8b"; else echo "$1"; fi
}

gpu_tests() {
  echo "== $(date -u +%H:%M:%SZ) GPU tests"
  "$PY" -m pytest -q -m gpu tests/test_calibration.py -p no:cacheprovider --noconftest -rs
}

capture_one() {
  local model="$1" name="$2" started=$SECONDS
  echo "== $(date -u +%H:%M:%SZ) calibrate $model -> $OUT/$name (budget ${BUDGET_S}s)"
  # shellcheck disable=SC2046  # calibrate_args is a list of words on purpose
  "$PY" -m calibration --model "$model" $(calibrate_args) --repeats "$REPEATS" --warmup "$WARMUP" \
    --time-budget-s "$BUDGET_S" -o "$OUT/$name" || return $?
  echo "== $name took $((SECONDS - started)) s"
}

compare_one() {
  local name="$1" ref="$2" ref_model="$3"
  echo "== compare $name with $ref (model $ref_model)"
  "$PY" -m calibration.compare_reference "$OUT/$name" "$ref" --model "$ref_model"
}

# One device.csv for the capture (one device), each model's run of the harness a run of its own:
# the importer reads it from the folder above the timings (cost_models/importers/device_ceilings.py).
merge_ceilings() {
  local run=0 f
  echo "run,test,value" >"$OUT/device.csv.tmp"
  for f in "$OUT"/*/device.csv; do
    [[ -f "$f" ]] || continue
    run=$((run + 1))
    tail -n +2 "$f" | sed "s/^[^,]*,/$run,/" >>"$OUT/device.csv.tmp"
    rm "$f"
  done
  mv "$OUT/device.csv.tmp" "$OUT/device.csv"
}

main() {
  print_versions
  local failed=0 model name ref
  if [[ "$SMOKE" == "1" ]]; then
    gpu_tests || { echo "!! GPU tests failed (exit $?)"; failed=1; }
  fi
  ref="$(reference_steps)"
  for model in $(model_list); do
    name="$(basename "$model")"
    [[ "$name" == config.json ]] && name="$(basename "$(dirname "$model")")"
    capture_one "$model" "$name" || { echo "!! calibrate $model failed (exit $?)"; failed=1; }
    if [[ -n "$ref" ]]; then
      compare_one "$name" "$ref" "$(reference_model "$name")" 2>&1 || echo "!! compare $name failed (exit $?)"
    else
      echo "== no reference steps.csv here: compare skipped"
    fi
  done
  merge_ceilings
  rm -rf "$OUT/.dry-run-models"
  echo "== $(date -u +%H:%M:%SZ) done in $SECONDS s (failed=$failed)"
  return "$failed"
}

main 2>&1 | tee "$OUT/capture.log"
