#!/usr/bin/env bash
# Issue 6's target shapes through `sagebuild bench` (whole call, SDPA in the same process),
# one JSON per shape under $OUT/targets, then one table: shape, SDPA ms, each provider's ms and
# speed-up, accuracy (BENCH_ARGS: more `sagebuild bench` options, e.g. --rounds 1). Used by scripts/gpu_check.sh (stage "targets").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/sagebuild-gpu-out}"; mkdir -p "$OUT/targets"
PY="${PYTHON:-python3}"
shapes="${TARGET_SHAPES:-1x16x1024x64 2x32x4096x128 2x32x4096x128c 1x32x16384x128 1x32x16384x128c 4x32x8192x64 1x16x8192x256}"
for s in $shapes; do
  causal="--no-causal"; [[ "$s" == *c ]] && causal="--causal"
  IFS=x read -r b h n d <<< "${s%c}"
  # shellcheck disable=SC2086
  $PY -m sagebuild bench --batch "$b" --heads "$h" --seq "$n" --head-dim "$d" $causal ${BENCH_ARGS:-} \
    --out "$OUT/targets/$s.json" > "$OUT/targets/$s.txt" 2>&1
  rc=$?; [[ $rc == 0 ]] || echo "bench $s: rc=$rc (40: below the profile's speed-up gate)"
done
$PY - "$OUT/targets" <<'PY'
import json, pathlib, sys
from sagebuild.report.render import plan_text
print("| shape | causal | provider | kind | kernel | median ms | back-to-back ms | sustained ms (SDPA / ours) | TFLOPS | SDPA time / ours | cos | rel L1 |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    doc = json.loads(f.read_text())
    c = doc["config"]
    shape = f"{c['batch']}×{c['heads']}×{c['seq'][0]}×{c['head_dim']}"
    for r in doc["rows"]:
        if r.get("error") or not r.get("timing"):
            print(f"| {shape} | {c['causal']} | {r['provider']} | {r['kind']} | {plan_text(r.get('plan'))} "
                  f"| error: {r.get('error')} | | | | | | |")
            continue
        a = r["accuracy"] or {}
        sp = r["speedup"] if r["speedup"] is not None else 1.0
        print(f"| {shape} | {c['causal']} | {r['provider']} | {r['kind']} | {plan_text(r.get('plan'))} | "
              f"{r['timing']['median_ms']:.4f} | {r['timing'].get('back_to_back_ms') or float('nan'):.4f} | "
              f"{r['timing'].get('sustained_ms') or float('nan'):.4f}"
              + (f" ({r['sustained_speedup']:.3f})" if r.get("sustained_speedup") else "") + " | "
              f"{r['tflops']:.0f} | {sp:.3f} | {a.get('cos', float('nan')):.5f} | {a.get('rel_l1', float('nan')):.4f} |")
PY
