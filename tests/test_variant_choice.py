"""``bench.compare_variants``: the bench's line saying which P·V variant the dispatch
picked and which one was fastest (issue 38), from bench rows or their JSON form; and on a GPU,
that ``sagebuild bench`` times every variant the GPU runs and prints that line."""

from __future__ import annotations

import pytest

from sagebuild.bench import BenchRow, Timing, compare_variants

FP16, FP8 = "qk_int8_pv_fp16", "qk_int8_pv_fp8"


def _row(seq: int, provider: str, ms: float | None, kind: str = "whole_call", plan: dict | None = None):
    timing = Timing.from_samples([ms] * 3) if ms is not None else None
    return BenchRow(seq, provider, kind, timing, None, None, None, plan=plan, error=None if ms else "boom")


def test_says_when_the_pick_won_and_when_the_other_variant_was_faster():
    rows = [
        _row(1024, "sdpa", 2.0, kind="baseline"),
        _row(1024, "sageattn", 1.1, plan={"variant": FP16}),
        _row(1024, FP16, 1.0),
        _row(1024, FP16, 0.5, kind="kernel_only"),  # kernel-only rows are not compared
        _row(1024, FP8, 1.5),
        _row(4096, "sageattn", 4.0, plan={"variant": FP16}),
        _row(4096, FP16, 4.0),
        _row(4096, FP8, 3.2),
    ]
    lines = compare_variants(rows, FP16).splitlines()
    assert lines[0] == (
        f"seq=1024: dispatch picks {FP16}; fastest: {FP16} ({FP16} 1.000 ms, {FP8} 1.500 ms; the pick won)"
    )
    assert lines[1].startswith(f"seq=4096: dispatch picks {FP16}; fastest: {FP8} ({FP8} 3.200 ms")
    assert lines[1].endswith(f"{FP8} is 1.25x faster than the pick)")
    # the same from the JSON form of the rows
    assert compare_variants([r.to_dict() for r in rows], FP16).splitlines() == lines


def test_the_plan_of_the_sageattn_row_names_the_pick_else_the_table():
    rows = [_row(512, FP16, 1.0), _row(512, FP8, 0.8), _row(512, "sageattn", 0.8, plan={"variant": FP8})]
    assert compare_variants(rows, FP16).startswith(f"seq=512: dispatch picks {FP8}; fastest: {FP8}")
    assert compare_variants(rows[:2], FP16).startswith(f"seq=512: dispatch picks {FP16}; fastest: {FP8}")


def test_a_variant_without_a_time_is_not_compared():
    rows = [_row(256, FP16, 1.0), _row(256, FP8, None)]
    assert compare_variants(rows, FP16) == (
        f"seq=256: dispatch picks {FP16}; fastest: not compared ({FP8} did not run or has no time)"
    )


@pytest.mark.gpu
def test_bench_on_a_gpu_times_every_variant_and_names_pick_and_winner():
    """On the GPU's profile: every variant ``dispatch.available_variants`` lists gets a whole-call
    row, and the result's note ends with one "dispatch picks X; fastest: Y" line per length."""
    from sagebuild import bench
    from sagebuild.attention import dispatch, plan
    from sagebuild.profiles import match

    arch = dispatch.device_arch("cuda")
    prof = match([arch])[0]
    cfg = bench.config_from_profile(prof, seq=(1024, 2048), warmup=2, reps=6)
    res = bench.run_bench(prof, cfg)
    timed = {r.provider for r in res.rows if r.kind == "whole_call" and r.timing is not None}
    assert set(dispatch.available_variants("cuda")) <= timed, res.rows
    lines = res.note.splitlines()[-2:]
    for seq, line in zip((1024, 2048), lines):
        picked = plan.make_plan(arch, head_dim=cfg.head_dim, n_k=seq, causal=cfg.causal).variant
        assert line.startswith(f"seq={seq}: dispatch picks {picked}"), line
        assert "; fastest: " in line, line
