#!/usr/bin/env python3
"""Where a kernel's warps wait, instruction by instruction (Nsight Compute's source counters).

    python scripts/ncu_source.py [--shape 2x32x4096x128] [--causal] [--top 25]   # GPU + ncu
    python scripts/ncu_source.py --csv REPORT.csv [--top 25]                      # any machine

On a GPU it profiles one steady-state launch of ``sageattn``'s attention kernel
(``scripts/ncu_attention.py --auto``; ``--kernel`` is ncu's kernel-name regex) with the
SourceCounters and WarpStateStats sections, exports the SASS page (``ncu -i REPORT --page
source --csv --print-source sass``, kept with ``--out``) and summarises it; ``--csv`` summarises
an export made elsewhere. The summary: the warp-state samples by stall reason, by opcode
(predicates stripped) and the instructions holding the most samples, each with its top reasons.
Aggregate stall ratios (``ncu_compare.sh``) say *that* warps wait; this says *where*: run 29
found the Triton kernel waiting 7.9 % of its samples for K at the top of the key loop, and the
hand-written kernel's epilogue 5.6 % on its V-scale loads.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
PREDICATE = re.compile(r"^@!?U?P[T\d]+\s+")


@dataclass
class Instr:
    address: str
    sass: str
    samples: float
    reasons: dict[str, float] = field(default_factory=dict)

    @property
    def opcode(self) -> str:
        text = PREDICATE.sub("", self.sass.strip())
        return text.split()[0].rstrip(";") if text else "?"


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def parse_source_csv(text: str) -> list[Instr]:
    """The SASS rows of an ``ncu --page source --csv --print-source sass`` export (its first line
    names the kernel, the second is the header; per-reason columns are ``stall_*``, the
    "(Not Issued)" duplicates are left out)."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if "Address" in r and SAMPLES in r), None)
    if start is None:
        raise ValueError(f"not an ncu source-page export: no header with 'Address' and '{SAMPLES}'")
    hdr = rows[start]
    i_addr, i_src, i_samp = hdr.index("Address"), hdr.index("Source"), hdr.index(SAMPLES)
    reasons = {h: i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h}
    out = []
    for r in rows[start + 1 :]:
        if len(r) <= i_samp:
            continue
        out.append(
            Instr(r[i_addr], r[i_src], _num(r[i_samp]), {h[6:]: _num(r[i]) for h, i in reasons.items()})
        )
    return out


def summarize(instrs: list[Instr], top: int = 25) -> dict:
    """Shares (per cent of all samples) by reason, by opcode (with its top reasons) and the
    ``top`` instructions."""
    total = sum(i.samples for i in instrs)
    if total <= 0:
        raise ValueError("the export holds no warp-state samples (was SourceCounters collected?)")
    by_reason: Counter = Counter()
    by_op: dict[str, Counter] = {}
    op_samples: Counter = Counter()
    for ins in instrs:
        op = ins.opcode
        by_reason.update(ins.reasons)
        by_op.setdefault(op, Counter()).update(ins.reasons)
        op_samples[op] += ins.samples

    def pct(x: float) -> float:
        return 100.0 * x / total

    return {
        "samples": total,
        "reasons": [(r, pct(v)) for r, v in by_reason.most_common() if v > 0],
        "opcodes": [
            (op, pct(v), [(r, pct(c)) for r, c in by_op[op].most_common(3) if c > 0])
            for op, v in op_samples.most_common(top)
        ],
        "instructions": [
            (
                i.address,
                i.sass.strip(),
                pct(i.samples),
                [(r, pct(c)) for r, c in Counter(i.reasons).most_common(2)],
            )
            for i in sorted(instrs, key=lambda i: -i.samples)[:top]
        ],
    }


def render(summary: dict) -> str:
    def reasons(pairs: list) -> str:
        return ", ".join(f"{r} {p:.1f}" for r, p in pairs)

    lines = [f"{summary['samples']:.0f} warp-state samples", "by reason (% of samples):"]
    lines += [f"  {r:18s} {p:5.1f}" for r, p in summary["reasons"][:12]]
    lines.append("by opcode (% of samples, top reasons):")
    lines += [f"  {op:40s} {p:5.1f}  {reasons(rs)}" for op, p, rs in summary["opcodes"]]
    lines.append("instructions holding the most samples:")
    lines += [
        f"  {a[-6:]:>6s} {p:5.2f}  {s[:64]:64s} {reasons(rs)}" for a, s, p, rs in summary["instructions"]
    ]
    return "\n".join(lines)


def profile(args: argparse.Namespace, out_csv: Path) -> str:
    """Run ncu on ``ncu_attention.py`` and export the SASS page to ``out_csv``; returns its text."""
    script = Path(__file__).resolve().parent / "ncu_attention.py"
    call = [sys.executable, str(script), "--shape", args.shape, "--calls", "3", "--auto"] + (
        ["--causal"] if args.causal else []
    )
    rep = out_csv.with_suffix("")
    cmd = [args.ncu, "--launch-skip", "1", "--launch-count", "1", "-k", f"regex:{args.kernel}",
           "--section", "SourceCounters", "--section", "WarpStateStats", "--import-source", "no",
           "-f", "-o", str(rep)] + call  # fmt: skip
    try:
        res = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise SystemExit(
            f"ncu_source.py: {args.ncu!r} not found: install Nsight Compute or pass --ncu PATH "
            "(or summarise a saved export with --csv)"
        ) from None
    if res.returncode != 0 or not rep.with_suffix(".ncu-rep").is_file():
        raise SystemExit(f"ncu failed ({' '.join(cmd)}):\n{(res.stdout + res.stderr)[-2000:]}")
    exp = [
        args.ncu,
        "-i",
        str(rep.with_suffix(".ncu-rep")),
        "--page",
        "source",
        "--csv",
        "--print-source",
        "sass",
    ]
    res = subprocess.run(exp, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"ncu could not export the source page ({' '.join(exp)}):\n{res.stderr[-2000:]}")
    text = res.stdout
    out_csv.write_text(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, help="summarise this export instead of profiling")
    ap.add_argument("--shape", default="2x32x4096x128", help="BxHxNxD (profiling)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--kernel", default="_attn_fwd", help="ncu kernel-name regex (profiling)")
    ap.add_argument("--ncu", default="ncu", help="the ncu executable")
    ap.add_argument(
        "--out", type=Path, help="where to keep the export (profiling; default: a temporary file)"
    )
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.csv is not None:
        try:
            text = args.csv.read_text(encoding="utf-8")
        except OSError as e:
            raise SystemExit(f"cannot read {args.csv}: {e.strerror}") from None
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="ncu_source-")) / "source.csv"
        text = profile(args, out)
        print(f"export: {out}")
    try:
        print(render(summarize(parse_source_csv(text), args.top)))
    except ValueError as e:
        raise SystemExit(f"ncu_source.py: {e}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
