#!/usr/bin/env bash
# The one GPU check, rerun after every kernel or plan change: install, compile, GPU tests, tune, benchmark, accept.
#   bash scripts/gpu_check.sh [install] [compile] [tests] [tune] [bench]     (default: all five)
# The tune stage runs `sagebuild tune --preset mission` and `--preset diffusion` (issue 58: <= 90 s and
# <= 240 s wall on an H100, compiles included) into the shared cache, so bench and accept replay the record.
# The accept stage (`sagebuild accept --profile auto --out "$OUT/accept"`) always runs last, even
# after a failed stage; it prints `accept: rc=N` and its exit code is this script's exit code.
# Output under $OUT (default /tmp/sagebuild-gpu-out): summary.txt (every stage's result, the
# benchmark table, the tail of each failed stage's log) and accept/ (the report, junit.xml, the
# lockfile). Full stage logs go to $LOGS (default /tmp/sagebuild-gpu-logs), outside $OUT, so that
# the device tool's 8-file limit leaves room for accept's files.
# ACCEPT_ARGS: more arguments for that accept (e.g. --tune: it tunes before its bench and its report
# compares the shipped table with the tuned choice per class).
# Carry `.whl/` (git-ignored) to install a diffusers wheel and its pure-Python dependency wheels
# (no index is used), and pytest-xdist's wheels to run the GPU tests in parallel. BENCH_ARGS: more arguments for scripts/bench_workloads.py (e.g. --only long).
# With Comfy Kitchen importable (PYTHONPATH), the bench stage adds its column and a `sagebuild bench --against all` run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/sagebuild-gpu-out}"
LOGS="${LOGS:-/tmp/sagebuild-gpu-logs}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT" "$LOGS"
export PYTHONUNBUFFERED=1
# One extension cache for compile, the tests and accept: tests/conftest.py otherwise isolates the
# tests in a temporary one (always, even with SAGEBUILD_CACHE_DIR set) and they would not exercise
# the build; SAGEBUILD_TEST_SHARED_CACHE=1 asks it to keep this one.
export SAGEBUILD_CACHE_DIR="${SAGEBUILD_CACHE_DIR:-/tmp/sagebuild-gpu-cache}"
export SAGEBUILD_TEST_SHARED_CACHE=1

all_stages="install compile tests tune bench"
stages="${*:-$all_stages}"
for s in $stages; do
  [[ " $all_stages accept " == *" $s "* ]] || { echo "gpu_check.sh: unknown stage '$s' (stages: $all_stages; accept always runs)" >&2; exit 2; }
done
has() { [[ " $stages " == *" $1 "* ]]; }
summary="$OUT/summary.txt"; : > "$summary"
say() { echo "$*" | tee -a "$summary"; }

# run NAME CMD...: the command's output to $LOGS/NAME.log; its rc and, on failure, its tail in the summary.
run() {
  local name="$1"; shift
  local t0=$SECONDS rc
  "$@" > "$LOGS/$name.log" 2>&1; rc=$?
  say "$name: rc=$rc in $(( SECONDS - t0 )) s"
  if [[ $rc -ne 0 ]]; then
    { echo "---- tail of $name.log"; tail -n 40 "$LOGS/$name.log"; echo "----"; } | tee -a "$summary"
  fi
  return $rc
}

install() {
  $PY -m pip install -q --no-deps --no-build-isolation -e . || return
  if ls .whl/diffusers-*.whl > /dev/null 2>&1; then
    # diffusers' pure-Python dependencies, when carried as wheels (never sageattention: the
    # doctor would rightly warn about a second attention package)
    # with its dependencies resolved from the carried wheels: only missing ones are installed, so
    # the box's own packages (transformers' huggingface_hub) stay as they are
    $PY -m pip install -q --no-index --find-links .whl diffusers || return
  fi
}

tests() {
  local rc=0
  if $PY -m pip install -q --no-index --find-links .whl pytest-xdist > /dev/null 2>&1 && $PY -c "import xdist" 2> /dev/null; then
    # pytest-xdist carried in .whl/: the extension's own tests first, alone (they build it and
    # swap that build into the shared cache; a process loads one build), then the other GPU
    # tests spread test by test over six workers (one file holds most of them), then the speed
    # tests alone. The 300,000-token cases (issue 60: ~22 GB each, ~2 min in all) run alone
    # before the parallel ones, whose workers' cached memory could make them skip.
    $PY -m pytest -q -rs -m gpu tests/test_gpu_ext.py -p no:cacheprovider || rc=$?
    $PY -m pytest -q -rs -m gpu tests/test_long_sequences_gpu.py -p no:cacheprovider || rc=$?
    $PY -m pytest -q -rs -m "gpu and not timing" -n 6 --ignore tests/test_gpu_ext.py \
      --ignore tests/test_long_sequences_gpu.py tests -p no:cacheprovider || rc=$?
    $PY -m pytest -q -rs -m "gpu and timing" tests -p no:cacheprovider || rc=$?
  else
    $PY -m pytest -q -rs -m gpu tests -p no:cacheprovider || rc=$?
  fi
  # unmarked, but they run on the GPU when there is one (the CPU interpreter otherwise)
  $PY -m pytest -q tests/test_replay.py tests/test_upstream_internals.py tests/test_varlen_prefix.py -p no:cacheprovider || rc=$?
  return $rc
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null | tee -a "$summary"
if has install; then run install install; fi
$PY -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'hip', torch.version.hip, 'triton', triton.__version__)" 2>&1 | tee -a "$summary"
if has compile; then run compile $PY -m sagebuild compile --profile auto --log "$LOGS/build.log"; fi
if has tests; then
  run tests tests
  grep -E "^[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s" "$LOGS/tests.log" | tee -a "$summary"
fi
# tune_preset NAME: the preset's JSON document to $LOGS/tune_NAME.json (diagnostics to the stage's log)
tune_preset() { $PY -m sagebuild tune --preset "$1" --json > "$LOGS/tune_$1.json"; }
if has tune; then
  for preset in mission diffusion; do
    run "tune_$preset" tune_preset "$preset"
    # one line per class: the winner, its time, SDPA's and the shipped table's pick
    $PY - "$LOGS/tune_$preset.json" <<'PYEOF' 2>&1 | tee -a "$summary"
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(0)
f = lambda x: f"{x:.4f}" if x else "-"
for c in doc.get("classes", []):
    w, s = c["winner"] or {}, c["shipped"] or {}
    ratio = c["sdpa_ms"] / w["ms"] if c.get("sdpa_ms") and w.get("ms") else 0
    print(f"  {c['class']:<26} winner {w.get('variant')} {w.get('config') or ''} {f(w.get('ms'))} ms, sdpa {f(c.get('sdpa_ms'))}, "
          f"shipped {f(s.get('ms'))} ({ratio:.2f}x SDPA, {c['seconds']} s)")
for s in doc.get("skipped", []):
    print(f"  not tuned: {s['class']}: {s['why']}")
print(f"  tune {doc.get('seconds')} s of budget {doc.get('budget_s')} s; record {doc.get('record')}")
PYEOF
  done
fi
if has bench; then
  # Comfy Kitchen importable (carried unpacked on PYTHONPATH): its column in the workloads table
  # (non-causal dense rows), and `sagebuild bench` timing every peer beside SDPA and ours
  peer_args=""
  if $PY -c "import comfy_kitchen" 2> /dev/null; then peer_args="--against ck"; fi
  # shellcheck disable=SC2086
  # --shipped: each class also timed with the tuning record ignored, interleaved (issue 58: tuning
  # must leave no class more than 3 % slower than the shipped table)
  run bench $PY scripts/bench_workloads.py --shipped ${BENCH_ARGS:-} $peer_args --json "$LOGS/bench.json"
  grep -E "^\||whole calls|^ck:" "$LOGS/bench.log" | tee -a "$summary"
  if [[ -n "$peer_args" ]]; then
    run bench_peers $PY -m sagebuild bench --seq 4096 --heads 24 --head-dim 128 --against all \
      --out "$LOGS/bench_peers.json"
    tail -n 40 "$LOGS/bench_peers.log" | tee -a "$summary"
  fi
  # issue 36's end-to-end target: a diffusers Wan forward, sage backend against native
  if $PY -c "import diffusers" 2> /dev/null; then
    run bench_diffusers $PY scripts/bench_diffusers.py --json "$LOGS/diffusers.json"
    grep -E "^\|" "$LOGS/bench_diffusers.log" | tee -a "$summary"
  fi
fi

# Always last, whatever happened above: the main job, its exit code is this script's.
# shellcheck disable=SC2086
$PY -m sagebuild accept --profile auto --out "$OUT/accept" ${ACCEPT_ARGS:-} > "$LOGS/accept.log" 2>&1
accept_rc=$?
tail -n 30 "$LOGS/accept.log" | tee -a "$summary"
say "accept: rc=$accept_rc"
exit $accept_rc
