#!/usr/bin/env bash
# sagebuild quick start: set up .venv and run the whole acceptance pipeline on this machine.
#   doctor → compile → verify → bench; the report lands in sagebuild-out/ (or $SAGEBUILD_OUT).
#
# torch is installed only when .venv has none. The default here is the CPU wheel (golden-model
# verify, CPU bench). For a GPU, install the matching torch into .venv FIRST and this script
# leaves it alone; `sagebuild profiles` prints each profile's exact line, e.g.
#   ROCm:  .venv/bin/pip install torch --index-url https://download.pytorch.org/whl/rocm6.4
#   CUDA:  .venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cu128
# (plain `pip install torch` on Linux gives the CUDA wheel; never let it replace a ROCm torch).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${SAGEBUILD_OUT:-sagebuild-out}"
PY=.venv/bin/python

if [ ! -x "$PY" ]; then
  echo "==> creating .venv"
  python3 -m venv .venv
fi
"$PY" -m pip install -q --upgrade pip

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "==> no torch in .venv: installing the CPU build (see the comment at the top for GPUs)"
  "$PY" -m pip install -q torch==2.13.0 triton==3.6.0
fi

echo "==> installing sagebuild (editable, with the test extra)"
"$PY" -m pip install -q -e '.[test]'

# The doctor is informational here: `accept` runs the same checks as its first step and stops
# there (exit 10) with every fix in the report, so a failing doctor must not hide that report.
echo "==> sagebuild doctor"
.venv/bin/sagebuild doctor || echo "(doctor found problems: accept will stop at them and write the report)"

echo "==> sagebuild accept --profile auto --out $OUT"
status=0
.venv/bin/sagebuild accept --profile auto --out "$OUT" || status=$?

echo
echo "report:   $OUT/report.html  (summary: $OUT/report.md, data: $OUT/report.json)"
echo "lockfile: $OUT/sagebuild.lock (check later with: .venv/bin/sagebuild lock --check $OUT/sagebuild.lock)"
exit "$status"
