#!/usr/bin/env python3
"""Rerun to refresh docs/performance.md's table: issue 36's workload classes, ours against SDPA (GPU).

    python scripts/bench_workloads.py [--only varlen,long] [--rounds 5] [--shipped] [--json FILE] [--list]

One process, whole calls through the public API only (``sagebuild.sageattn``,
``sagebuild.sageattn_varlen``) against what the caller would otherwise run: PyTorch SDPA's
default backend (per segment for packed sequences, with a key mask for padded text). Timing is
``sagebuild.bench.timing``'s, as ``sagebuild bench`` and ``sagebuild tune`` time: warm-up, then
rounds that time every provider in another order each (a Williams design), each call's device
time with the L2 flushed before it and the GPU held busy while the host issues it (small calls
measure their kernels, not the host); about --rep-ms of calls per provider and round, and the table
gives the median of all of a provider's calls. "ratio" is SDPA's time over ours (above 1:
faster). Varlen rows also time the dense ``sageattn`` call on the same packed tokens ("/ dense":
issue 36 asks ≤ 1.1), masked rows the unmasked call on the same padded batch (issue 35 asks
≤ 1.1). cos and rel L1 compare our output with SDPA's on the same inputs. ``--against ck`` (any of
``sagebuild bench --against``'s peers) adds the peer's time, its time over ours ("ck / ours": above
1, ours is faster) and its cos against SDPA for the dense rows it can run (Comfy Kitchen: the
non-causal ones); a peer that cannot run a row leaves it blank and the JSON says why. "ran" says
whether ``sageattn`` ran the kernels or routed the class to SDPA (``sagebuild.attention.route``:
this machine's tuning record and the shipped classes; ``SAGEBUILD_ROUTE=0`` measures the kernels
alone). ``--shipped`` also times each ``sageattn`` call with this machine's tuning record ignored
(``SAGEBUILD_TUNING=0``) in the same rounds: "shipped / tuned" above 1 means tuning made the class
faster; "plan" says whether the record changed the dense call's launch plan at all ("same": the
two columns time one launch, and their ratio is the timing's noise). Exit 1 when a row failed to run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

import sagebuild
from sagebuild import knobs, sageattn, sageattn_varlen
from sagebuild.attention import api, route
from sagebuild.attention.metrics import accuracy
from sagebuild.bench import providers, timing
from sagebuild.bench.config import parse_against
from sagebuild.bench.peers import Peer, peers
from sagebuild.errors import SagebuildError

Fn = Callable[[], Any]


@dataclass
class Case:
    """One workload: its three calls (ours, SDPA baseline, optionally dense ours) and how to
    bring both outputs to one [tokens, heads, dim] view for the accuracy columns."""

    ours: Fn
    sdpa: Fn
    dense: Fn | None
    ours_out: Callable[[Any], torch.Tensor]
    sdpa_out: Callable[[Any], torch.Tensor]
    inputs: providers.Case | None = None  # a dense call's q, k, v (HND): what peers are timed on


def _rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=dtype)


def _hnd(x: torch.Tensor) -> torch.Tensor:
    """[B, H, N, D] -> [B·N, H, D], the packed layout, for comparing outputs."""
    return x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3])


def _key_padding_mask(nk: int, valid: list[int]) -> torch.Tensor:
    """[B, 1, 1, nk] boolean: batch entry i attends to its first valid[i] keys."""
    keep = torch.arange(nk, device="cuda")[None, :] < torch.tensor(valid, device="cuda")[:, None]
    return keep[:, None, None, :]


def dense(b: int, h: int, nq: int, d: int, dtype: torch.dtype, causal: bool = False, nk: int = 0) -> Case:
    q = _rand(b, h, nq, d, dtype=dtype)
    k, v = (_rand(b, h, nk or nq, d, dtype=dtype) for _ in range(2))
    return Case(
        ours=lambda: sageattn(q, k, v, is_causal=causal),
        sdpa=lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        dense=None,
        ours_out=_hnd,
        sdpa_out=_hnd,
        inputs=providers.Case(nq, q, k, v, "HND", causal),
    )


def packed(lens: list[int], hq: int, hk: int, d: int, dtype: torch.dtype, causal: bool) -> Case:
    """Sequences packed as [total, H, D] (video clips, LLM prefill), SDPA once per segment."""
    total = sum(lens)
    q = _rand(total, hq, d, dtype=dtype)
    k, v = (_rand(total, hk, d, dtype=dtype) for _ in range(2))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    views = [tuple(x[s:e].transpose(0, 1).unsqueeze(0) for x in (q, k, v)) for s, e in bounds]
    gqa = {"enable_gqa": True} if hq != hk else {}
    qd, kd, vd = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    return Case(
        ours=lambda: sageattn_varlen(q, k, v, cu, cu, max(lens), max(lens), is_causal=causal),
        sdpa=lambda: [F.scaled_dot_product_attention(a, b, c, is_causal=causal, **gqa) for a, b, c in views],
        dense=lambda: sageattn(qd, kd, vd, is_causal=causal),
        ours_out=lambda o: o,
        sdpa_out=lambda outs: torch.cat([o[0].transpose(0, 1) for o in outs]),
    )


def key_padding(
    b: int, nq: int, nk: int, valid: list[int], h: int, d: int, dtype: torch.dtype, per_sequence: bool = False
) -> Case:
    """Text key padding as diffusers' sage varlen backend meets it: ours on the valid keys packed;
    SDPA with a boolean key mask on the padded batch (diffusers' native call) or, ``per_sequence``,
    once per batch entry on its valid keys unmasked (faster: the baseline issue 36 also names)."""
    q = _rand(b, h, nq, d, dtype=dtype)
    k, v = (_rand(b, h, nk, d, dtype=dtype) for _ in range(2))
    attn_mask = _key_padding_mask(nk, valid)
    qp = _hnd(q).contiguous()
    kp, vp = (torch.cat([x[i, :, : valid[i]].transpose(0, 1) for i in range(b)]) for x in (k, v))
    cuq = torch.arange(0, (b + 1) * nq, nq, device="cuda", dtype=torch.int32)
    cuk = torch.tensor([0, *torch.tensor(valid).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    qd, kd, vd = (x.transpose(0, 1).unsqueeze(0) for x in (qp, kp, vp))
    views = [(q[i : i + 1], k[i : i + 1, :, : valid[i]], v[i : i + 1, :, : valid[i]]) for i in range(b)]
    return Case(
        ours=lambda: sageattn_varlen(qp, kp, vp, cuq, cuk, nq, max(valid)),
        sdpa=(lambda: [F.scaled_dot_product_attention(*x) for x in views])
        if per_sequence
        else lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask),
        dense=lambda: sageattn(qd, kd, vd),
        ours_out=lambda o: o,
        sdpa_out=(lambda outs: torch.cat([_hnd(o) for o in outs])) if per_sequence else _hnd,
    )


def masked_key_padding(
    b: int, nq: int, nk: int, valid: list[int], h: int, d: int, dtype: torch.dtype
) -> Case:
    """The same padded text batch with the mask in our kernels (``sageattn(..., attn_mask=)``);
    the "/ dense" column is this call over the unmasked one (issue 35 asks <= 1.1)."""
    q = _rand(b, h, nq, d, dtype=dtype)
    k, v = (_rand(b, h, nk, d, dtype=dtype) for _ in range(2))
    mask = _key_padding_mask(nk, valid)
    return Case(
        ours=lambda: sageattn(q, k, v, attn_mask=mask),
        sdpa=lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        dense=lambda: sageattn(q, k, v),
        ours_out=_hnd,
        sdpa_out=_hnd,
    )


F16, BF16 = torch.float16, torch.bfloat16

# (workload, shape as printed, dtype, builder): issue 36's classes and the long-sequence targets.
WORKLOADS: list[tuple[str, str, torch.dtype, Callable[[], Case]]] = [
    ("varlen: two video clips", "lens 4680+3120, H 12, D 128", BF16,
     lambda: packed([4680, 3120], 12, 12, 128, BF16, False)),
    ("varlen: text key padding", "B 2, Nq 4096, Nk 512 (137/512 valid), H 24, D 128", BF16,
     lambda: key_padding(2, 4096, 512, [137, 512], 24, 128, BF16)),
    ("varlen: text key padding, SDPA per sequence", "B 2, Nq 4096, Nk 512 (137/512 valid), H 24, D 128",
     BF16, lambda: key_padding(2, 4096, 512, [137, 512], 24, 128, BF16, per_sequence=True)),
    ("mask: text key padding in the kernel", "B 2, Nq 4096, Nk 512 (137/512 valid), H 24, D 128", BF16,
     lambda: masked_key_padding(2, 4096, 512, [137, 512], 24, 128, BF16)),
    ("varlen: LLM prefill, GQA 32/8, causal", "lens 1000+3000+4192, D 128", F16,
     lambda: packed([1000, 3000, 4192], 32, 8, 128, F16, True)),
    ("cross-attention to text", "1×40, Nq 32760, Nk 512, D 128", BF16,
     lambda: dense(1, 40, 32760, 128, BF16, nk=512)),
    ("SDXL cross-attention", "2×10, Nq 4096, Nk 77, D 64", F16, lambda: dense(2, 10, 4096, 64, F16, nk=77)),
    ("SD1.5 self-attention, head dim 40", "2×8×4096×40", F16, lambda: dense(2, 8, 4096, 40, F16)),
    ("SD1.5 self-attention, head dim 160", "2×8×256×160", F16, lambda: dense(2, 8, 256, 160, F16)),
    ("small (the mission's bench)", "1×16×1024×64", F16, lambda: dense(1, 16, 1024, 64, F16)),
    ("short", "2×32×1024×128", F16, lambda: dense(2, 32, 1024, 128, F16)),
    ("medium", "1×16×4096×64", F16, lambda: dense(1, 16, 4096, 64, F16)),
    ("medium", "2×32×2048×128", F16, lambda: dense(2, 32, 2048, 128, F16)),
    ("LLM prefill, head dim 80, causal", "1×32×4096×80", F16, lambda: dense(1, 32, 4096, 80, F16, True)),
    ("LLM prefill, head dim 96, causal", "1×32×4096×96", F16, lambda: dense(1, 32, 4096, 96, F16, True)),
    ("long", "2×32×4096×128", F16, lambda: dense(2, 32, 4096, 128, F16)),
    ("long, causal", "2×32×4096×128", F16, lambda: dense(2, 32, 4096, 128, F16, True)),
    ("long", "1×32×16384×128", F16, lambda: dense(1, 32, 16384, 128, F16)),
    ("long, causal", "1×32×16384×128", F16, lambda: dense(1, 32, 16384, 128, F16, True)),
    ("long, head dim 64", "4×32×8192×64", F16, lambda: dense(4, 32, 8192, 64, F16)),
    ("video self-attention (Wan 14B 480p)", "1×40×32760×128", BF16, lambda: dense(1, 40, 32760, 128, BF16)),
    ("head dim 256", "1×16×8192×256", F16, lambda: dense(1, 16, 8192, 256, F16)),
]  # fmt: skip


def peer_calls(case: Case, against: list[Peer]) -> tuple[dict[str, Fn], dict[str, str]]:
    """The peers' calls on a dense case's inputs, and why each other peer cannot run it."""
    calls, reasons = {}, {}
    c = case.inputs
    for peer in against:
        if c is None:
            reason = "packed or masked row: peers are timed on dense calls"
        else:
            dtype = str(c.q.dtype).removeprefix("torch.")
            reason = peer.available(c.shape(), dtype, "HND", c.causal, c.q.device)
        if reason:
            reasons[peer.name] = reason
        else:
            calls[peer.name] = peer.build(c).call
    return calls, reasons


@contextlib.contextmanager
def shipped_table() -> Iterator[None]:
    """``SAGEBUILD_TUNING=0`` for the calls inside: the shipped config table and classes decide
    (plan knobs are part of each call's plan key, so the tuned and shipped plans coexist)."""
    before = os.environ.get("SAGEBUILD_TUNING")
    os.environ["SAGEBUILD_TUNING"] = "0"
    knobs.refresh()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SAGEBUILD_TUNING", None)
        else:
            os.environ["SAGEBUILD_TUNING"] = before
        knobs.refresh()


def tuned_plan(case: Case) -> str:
    """Whether this machine's tuning record changes a dense call's plan: "tuned" where it does,
    "same" where the shipped table plans the very same launch (a "shipped / tuned" away from 1 is
    then the timing's noise, not tuning's effect); "" for packed and masked rows."""
    x = case.inputs
    if x is None:
        return ""

    def plan() -> dict[str, Any]:
        rec = api.launch_plan(x.q, x.k, x.v, x.layout, x.causal)
        rec.pop("tuned")  # which class decided: named differently even when the launch is the same
        return rec

    mine = plan()
    with shipped_table():
        return "same" if plan() == mine else "tuned"


def _ran(fn: Fn) -> str:
    """What one call of ``fn`` ran: our kernels or SDPA (routed)."""
    route.reset()
    fn()
    return "SDPA (routed)" if route.routed() else "kernels"


# do_bench-like budgets per provider and round: --rep-ms of timed calls, --warmup-ms of warm-up,
# each between 3 (1 for warm-up) and this many calls
MAX_CALLS_PER_ROUND = 100


def _shipped(fn: Fn) -> Fn:
    """``fn`` called with this machine's tuning record ignored (``shipped_table``)."""

    def call() -> Any:
        with shipped_table():
            return fn()

    return call


def measure(
    case: Case, rounds: int, warmup_ms: int, rep_ms: int, against: list[Peer], shipped: bool = False
) -> dict[str, Any]:
    """Each provider's cold device time (ms) in interleaved rounds (``bench.timing``), then the
    accuracy. ``shipped`` adds "shipped": the same ``sageattn`` call with this machine's tuning
    record ignored."""
    fns = {"ours": case.ours, "sdpa": case.sdpa}
    if shipped:
        fns["shipped"] = _shipped(case.ours)
    if case.dense is not None:
        fns["dense"] = case.dense
    theirs, reasons = peer_calls(case, against)
    fns.update(theirs)

    for fn in fns.values():  # compile, record and replay before timing
        for _ in range(3):
            fn()
    ran, ran_shipped = _ran(case.ours), _ran(fns["shipped"]) if shipped else ""
    per_call = timing.one_of_each_ms(list(fns.values()), torch.device("cuda")) / len(fns)
    per_round = max(3, min(MAX_CALLS_PER_ROUND, int(rep_ms / per_call)))
    warmup = max(1, min(MAX_CALLS_PER_ROUND, int(warmup_ms / per_call)))
    timed = timing.time_named(fns, warmup, per_round * rounds, rounds, torch.device("cuda"))
    for t in timed.values():
        if isinstance(t, Exception):
            raise t
    ms = {name: t.median_ms for name, t in timed.items()}
    want = case.sdpa_out(case.sdpa())
    acc = accuracy(case.ours_out(case.ours()), want)
    peer_cos = {name: accuracy(_hnd(fn()), want)["cos"] for name, fn in theirs.items()}
    out = {
        "ms": ms,
        "ratio": ms["sdpa"] / ms["ours"],
        "cos": acc["cos"],
        "rel_l1": acc["rel_l1"],
        "ran": ran,
        "peers": {n: {"ms": ms[n], "vs_ours": ms[n] / ms["ours"], "cos": peer_cos[n]} for n in theirs},
        "peers_not_run": reasons,
    }
    if shipped:
        out["shipped"] = {
            "ms": ms["shipped"],
            "vs_tuned": ms["shipped"] / ms["ours"],
            "ran": ran_shipped,
            "plan": tuned_plan(case),
        }
    return out


def peer_cells(res: dict[str, Any], against: list[Peer]) -> str:
    """The row's peer columns: ms, its time over ours, cos against SDPA (blank where it did not run)."""
    cells = []
    for peer in against:
        p = res.get("peers", {}).get(peer.name)
        cells += [f"{p['ms']:.4f}", f"{p['vs_ours']:.2f}×", f"{p['cos']:.5f}"] if p else ["", "", ""]
    return "".join(f" {c} |" for c in cells)


def shipped_cells(res: dict[str, Any]) -> str:
    """The ``--shipped`` columns: its ms, its time over the tuned call's, what it ran, and whether
    the record changed the plan (``tuned_plan``)."""
    s = res.get("shipped")
    return f" {s['ms']:.4f} | {s['vs_tuned']:.2f}× | {s['ran']} | {s['plan']} |" if s else ""


def _probe() -> tuple[Any, ...]:
    """A small dense call's ``available`` arguments: a peer that cannot even import says why."""
    return providers.Shape(1, 1, 128, 64, 1, 128), "float16", "HND", False, torch.device("cuda")


def header() -> str:
    props = torch.cuda.get_device_properties(0)
    import triton

    from sagebuild import knobs
    from sagebuild.attention import dispatch, plan
    from sagebuild.tuning import record

    arch = dispatch.device_arch("cuda")
    tuned = record.record_path(arch) if record.tuned(arch) is not None else "none (shipped classes)"
    if knobs.switch("SAGEBUILD_TUNING") is False:
        tuned = "ignored (SAGEBUILD_TUNING=0: the shipped table and classes)"
    return (
        f"{datetime.date.today()}, {props.name}, torch {torch.__version__}, Triton {triton.__version__}, "
        f"sagebuild {sagebuild.__version__}: whole calls, cold device-time medians (L2 flushed, host lead), "
        "interleaved rounds; "
        f"routing {'on' if plan.routing() else 'off'}, tuning record: {tuned}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated substrings of workload names or shapes")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per workload (default 5)")
    ap.add_argument("--warmup-ms", type=int, default=25)
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--json", default="", help="also write the rows to this file")
    ap.add_argument("--list", action="store_true", help="print the workloads and exit")
    ap.add_argument("--against", default="", help="peers to time beside ours on dense rows, e.g. ck")
    ap.add_argument(
        "--shipped",
        action="store_true",
        help="also time each sageattn call with the tuning record ignored (SAGEBUILD_TUNING=0), "
        "interleaved: 'shipped / tuned' above 1 means tuning made the class faster",
    )
    args = ap.parse_args()
    try:
        against = peers(parse_against(args.against)) if args.against else []
    except SagebuildError as exc:
        print(f"error: {exc.message} ({exc.fix})", file=sys.stderr)
        return 2
    picks = [s.strip() for s in args.only.split(",") if s.strip()]
    chosen = [w for w in WORKLOADS if not picks or any(p in w[0] or p in w[1] for p in picks)]
    if args.list or not chosen:
        for name, shape, dtype, _ in WORKLOADS:
            print(f"{name} | {shape} | {str(dtype).removeprefix('torch.')}")
        if not chosen:
            print(f"error: --only {args.only!r} matches no workload above", file=sys.stderr)
            return 2
        return 0
    if args.rounds < 1:
        print(f"error: --rounds must be at least 1, got {args.rounds}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA/ROCm GPU visible to torch; run this on the GPU machine", file=sys.stderr)
        return 2
    print(header())
    for p in against:
        print(f"{p.name}: {p.label}, {p.what() if p.load() else p.available(*_probe())}")
    extra = "".join(f" {p.name} ms | {p.name} / ours | {p.name} cos |" for p in against)
    extra += " shipped ms | shipped / tuned | shipped ran | plan |" if args.shipped else ""
    print(f"| workload | shape | dtype | ours ms | SDPA ms | ratio | / dense | cos | rel L1 | ran |{extra}")
    print("|" + " --- |" * (10 + 3 * len(against) + 4 * args.shipped))

    rows, failed = [], False
    for name, shape, dtype, build in chosen:
        dt = str(dtype).removeprefix("torch.")
        try:
            res = measure(build(), args.rounds, args.warmup_ms, args.rep_ms, against, args.shipped)
        except Exception as exc:  # one failing class must not hide the others' numbers
            failed = True
            print(f"| {name} | {shape} | {dt} | error: {type(exc).__name__}: {exc} | | | | | | |", flush=True)
            rows.append(
                {"workload": name, "shape": shape, "dtype": dt, "error": f"{type(exc).__name__}: {exc}"}
            )
            continue
        finally:
            torch.cuda.empty_cache()
        ms = res["ms"]
        vd = f"{ms['ours'] / ms['dense']:.2f}" if "dense" in ms else ""
        print(
            f"| {name} | {shape} | {dt} | {ms['ours']:.4f} | {ms['sdpa']:.4f} | {res['ratio']:.2f}× | {vd} | "
            f"{res['cos']:.5f} | {res['rel_l1']:.4f} | {res['ran']} |"
            f"{peer_cells(res, against)}{shipped_cells(res)}",
            flush=True,
        )
        rows.append({"workload": name, "shape": shape, "dtype": dt, **res})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header(), "rows": rows}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
