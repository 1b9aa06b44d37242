#!/usr/bin/env bash
# Nsight Compute on the attention kernels at one shape, one profile per variant, key lines only:
#   bash scripts/ncu_compare.sh [BxHxNxD] [extra args for ncu_attention.py]
# Variants: the portable kernel, the opt-in warp-specialised Hopper kernel (sm90 only) and SDPA's
# kernel for reference. Also prints each variant's warp stall breakdown (cycles per issued
# instruction, by reason) and the tensor / MUFU (xu) pipe utilisation.
# Needs Nsight Compute (`ncu`, or NCU=path) and permission to read the GPU's counters.
set -uo pipefail
cd "$(dirname "$0")/.."
SHAPE="${1:-2x32x4096x128}"; shift || true
NCU="${NCU:-ncu}"
KEYS='Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Issue Slots Busy|Issued Ipc Active|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Achieved Occupancy|Registers Per Thread|Block Limit Registers|Block Limit Shared Mem|Theoretical Occupancy|Executed Ipc Active|SM Busy|stall'
METRICS='regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,regex:sm__pipe_tensor_op_.*cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active'
for variant in portable ws sdpa; do
  kernels="regex:_attn_fwd"; extra=()
  case $variant in
    portable) env="SAGEBUILD_WS_CONFIG=off" ;;
    ws) env="SAGEBUILD_WS_CONFIG=on" ;;
    sdpa) env="SAGEBUILD_WS_CONFIG=off"; kernels="regex:sdpa|fmha|flash|attention"; extra=(--sdpa) ;;
  esac
  echo "==== $variant ($SHAPE)"
  env $env "$NCU" --launch-skip 3 --launch-count 1 -k "$kernels" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats \
    --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
    python3 scripts/ncu_attention.py --shape "$SHAPE" "${extra[@]}" "$@" 2>&1 \
    | grep -E "$KEYS|ERR|==PROF==.*(rror|denied)" | grep -v "^ *[a-z].*\. *$" | sed -E 's/ +/ /g'
  env $env "$NCU" --launch-skip 3 --launch-count 1 -k "$kernels" --metrics "$METRICS" \
    python3 scripts/ncu_attention.py --shape "$SHAPE" "${extra[@]}" "$@" 2>&1 \
    | grep -E "smsp__average_warps_issue_stalled|sm__pipe_tensor|pipe_xu" \
    | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//; s/ +/ /g' \
    | awk '$NF+0 >= 0.1 || /pipe/'
done
