#!/usr/bin/env bash
# One call on a lent GPU box: install the project, run the GPU tests, the benchmark and the
# acceptance pipeline, print a short table last. Stages can be picked:
#   bash scripts/gpu_check.sh [ceilings] [tests] [ext] [bench] [targets] [ws] [ncu] [sm90] [host] [tma] [pdl]
#        [keyorder] [pipe] [accept] [example] [tune]
#   (targets: scripts/bench_targets.sh, issue 6's shapes through `sagebuild bench`)
#   (tma: the opt-in TMA tiles against per-thread copies, table config and 64,128,4,3,168)
#   (pdl: programmatic dependent launch (SAGEBUILD_PDL) off and on: its GPU tests, then timings)
#   (pipe: the pipelined wgmma (SAGEBUILD_WGMMA_PIPE) off and on: its GPU tests, then device timings)
#   (keyorder: FP8 V in wgmma key order (SAGEBUILD_V_KEY_ORDER) off and on: GPU tests, device timings)
#   (ws: scripts/ws_bench.py, the warp-specialised Hopper kernel against the portable one)
#   (ncu: scripts/ncu_source.py, sageattn's warps' stall samples by SASS instruction at NCU_SHAPE)
#   (sm90: the hand-written kernels of scripts/experiments/sm90_attn against sageattn, SM90_VARIANTS)
#   (default: ceilings tests ext bench accept example; TUNE_ARGS passes arguments to scripts/tune_attention.py)
# The extension is built before the tests, so that the GPU tests exercise it.
# Carry `.whl` (sageattention 1.0.6 wheel, for the comparison) when calling through the device tool.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/sagebuild-gpu-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# one extension cache for the compile stage and the tests (tests/conftest.py otherwise isolates
# the tests in a temporary one)
export SAGEBUILD_CACHE_DIR="${SAGEBUILD_CACHE_DIR:-/tmp/sagebuild-gpu-cache}"
PY="${PYTHON:-python3}"
stages="${*:-ceilings tests ext bench accept example}"
has() { [[ " $stages " == *" $1 "* ]]; }
summary="$OUT/summary.txt"; : > "$summary"

$PY -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
# sageattention 1.0.6 goes to its own dir, used by the benchmark only (the doctor would warn about it).
if ls .whl/sageattention-*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-deps --no-index --target /tmp/sage106 .whl/sageattention-*.whl >/dev/null 2>&1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$summary"
$PY -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a "$summary"

if has ceilings; then
  $PY scripts/gpu_ceilings.py 2>&1 | tee "$OUT/ceilings.txt" | grep ceiling >> "$summary"
fi
if has ext; then
  t0=$(date +%s)
  $PY -m sagebuild compile --profile hopper-cu12 --json --log "$OUT/build.log" > "$OUT/compile.json" 2> "$OUT/compile.err"
  rc=$?; echo "compile: rc=$rc in $(( $(date +%s) - t0 )) s" >> "$summary"; tail -n 15 "$OUT/compile.err"
fi
if has tests; then
  $PY -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.txt" | tail -n 25
  echo "gpu tests: $(tail -n 1 "$OUT/gpu_tests.txt")" >> "$summary"
  # unmarked tests that run on the GPU when there is one (CPU interpreter otherwise)
  $PY -m pytest -q tests/test_replay.py -p no:cacheprovider 2>&1 | tee "$OUT/replay_tests.txt" | tail -n 5
  echo "replay tests: $(tail -n 1 "$OUT/replay_tests.txt")" >> "$summary"
fi
if has bench; then
  # shellcheck disable=SC2086
  PYTHONPATH=/tmp/sage106 $PY scripts/bench_kernels.py ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.txt" | tail -n 40
fi
if has targets; then
  bash scripts/bench_targets.sh 2>&1 | tee "$OUT/targets.txt" | tail -n 60
fi
if has ws; then
  # shellcheck disable=SC2086
  $PY scripts/ws_bench.py ${WS_ARGS:-} 2>&1 | tee "$OUT/ws.txt" | tail -n 30
fi
if has ncu; then
  $PY scripts/ncu_source.py --shape "${NCU_SHAPE:-2x32x4096x128}" --out "$OUT/ncu_source.csv" --top 20 2>&1 \
    | tee "$OUT/ncu_source.txt" | tail -n 45
fi
if has sm90; then
  # shellcheck disable=SC2086
  $PY scripts/experiments/sm90_attn/sm90_attn.py ${SM90_VARIANTS:-three_cta three_cta_q} --rounds 5 2>&1 \
    | tee "$OUT/sm90.txt" | tail -n 30
fi
if has host; then
  PYTHONPATH=/tmp/sage106 $PY scripts/profile_host.py 2>&1 | tee "$OUT/host.txt" | grep -E "host-profile|tottime|attn|api|quant|launch|jit" | head -n 40
fi
if has tma; then
  for tma in 0 1; do
    echo "== SAGEBUILD_TMA=$tma" | tee -a "$OUT/tma.txt"
    SAGEBUILD_TMA=$tma $PY scripts/ab_env.py "SAGEBUILD_ATTN_CONFIG=;64,128,4,3,168" \
      --shapes "${TMA_SHAPES:-2x32x4096x128,2x32x4096x128c,1x32x16384x128}" 2>&1 | tee -a "$OUT/tma.txt" | tail -n 8
  done
fi
if has pdl; then
  $PY -m pytest -q -m gpu tests -p no:cacheprovider -k pdl 2>&1 | tee "$OUT/pdl_tests.txt" | tail -n 3
  echo "pdl tests: $(tail -n 1 "$OUT/pdl_tests.txt")" >> "$summary"
  $PY scripts/ab_env.py "SAGEBUILD_PDL=0;1" \
    --shapes "${PDL_SHAPES:-1x16x1024x64,2x32x4096x128,2x32x4096x128c,1x32x16384x128}" 2>&1 | tee "$OUT/pdl.txt" | tail -n 10
fi
if has keyorder; then
  $PY -m pytest -q -m gpu tests -p no:cacheprovider -k "key_order or tma or graphed or pdl or pipe or golden or accuracy or bound" 2>&1 \
    | tee "$OUT/keyorder_tests.txt" | tail -n 5
  echo "key order tests: $(tail -n 1 "$OUT/keyorder_tests.txt")" >> "$summary"
  $PY scripts/ab_env.py "SAGEBUILD_V_KEY_ORDER=0;1" --graph --rounds 3 \
    --shapes "${KEYORDER_SHAPES:-2x32x4096x128,2x32x4096x128c,1x32x16384x128,1x32x16384x128c,4x32x8192x64,1x16x8192x256,2x16x4096x96,1x16x8192x192,1x16x1024x64}" \
    2>&1 | tee "$OUT/keyorder_ab.txt" | tail -n 20
fi
if has pipe; then
  $PY -m pytest -q -m gpu tests -p no:cacheprovider -k wgmma_pipe 2>&1 | tee "$OUT/pipe_tests.txt" | tail -n 3
  echo "pipe tests: $(tail -n 1 "$OUT/pipe_tests.txt")" >> "$summary"
  $PY scripts/ab_env.py "SAGEBUILD_WGMMA_PIPE=0;1" --graph --rounds 5 \
    --shapes "${PIPE_SHAPES:-2x32x4096x128,2x32x4096x128c,1x32x16384x128,1x32x16384x128c,4x32x8192x64,1x16x8192x256,1x16x1024x64}" \
    2>&1 | tee "$OUT/pipe.txt" | tail -n 16
fi
if has tune; then
  # shellcheck disable=SC2086
  $PY scripts/tune_attention.py ${TUNE_ARGS:-} --json "$OUT/tune.json" 2>&1 | tee "$OUT/tune.txt" | tail -n 30
fi
if has accept; then
  $PY -m sagebuild doctor --json > "$OUT/doctor.json" 2> "$OUT/doctor.err"; echo "doctor: rc=$?" >> "$summary"
  $PY -m sagebuild accept --profile hopper-cu12 --out "$OUT/accept" --seq 1024,4096,16384 --json \
    > "$OUT/accept.json" 2> "$OUT/accept.err"
  echo "accept: rc=$?" >> "$summary"; tail -n 30 "$OUT/accept.err"
  $PY -m sagebuild lock --check "$OUT/accept/sagebuild.lock" > /dev/null 2> "$OUT/lock_check.err"
  echo "lock --check: rc=$?" >> "$summary"
  cp "$OUT/accept/report.md" "$OUT/accept_report.md" 2>/dev/null
fi
if has example; then
  $PY examples/hf_llama_patch.py --device cuda --dtype float16 --layers 8 --seq 6144 --new-tokens 32 2>&1 | tee "$OUT/example.txt" | tail -n 15
fi
echo; echo "==== summary ===="; cat "$summary"
