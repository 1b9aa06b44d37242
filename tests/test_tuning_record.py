"""The tuning record (``sagebuild.tuning.record``): its file, its fingerprint and its matching rules."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest

from sagebuild import knobs
from sagebuild.errors import SagebuildError
from sagebuild.tuning import defaults, record
from sagebuild.tuning.record import Choice, Fingerprint, ShapeClass, TunedClass, TuningRecord

FP = Fingerprint(
    gpu="NVIDIA H100 80GB HBM3", arch="sm90", driver="nvidia 580.159.04", runtime="cuda 13.0",
    torch="2.11.0+cu130", triton="3.6.0", sagebuild="0.1.0", table="2026.12.06.3",
)  # fmt: skip


def _cls(
    d: int, nq: int, nk: int, bh: int, winner: Choice, causal: bool = False, masked: bool = False
) -> TunedClass:
    return TunedClass(ShapeClass(d, nq, nk, bh, causal, masked), winner, sdpa_ms=1.0)


OURS = Choice("ours", "fp8acc", "64,128,4,2,168,tma,pipe", 0.5)
SDPA = Choice("sdpa", ms=0.9)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SAGEBUILD_TUNING", "1")  # tests/conftest.py turns the file record off
    knobs.refresh()
    record.uninstall()
    yield tmp_path
    record.uninstall()


def test_round_trip_through_the_file(cache):
    rec = TuningRecord(FP, [
        TunedClass(ShapeClass(64, 1024, 1024, 16, False), SDPA, 0.9, OURS),
        TunedClass(ShapeClass(128, 4096, 512, 48, False, True), OURS, 0.9, SDPA,
                   failed=(record.Failure("fp8", "128,128,8,3", "spills 24 registers"),)),
    ])  # fmt: skip
    path = record.save(rec)
    assert path == cache / "tuning" / "sm90.json"
    back = record.read(path)
    assert back.fingerprint == FP and back.classes == rec.classes and back.created
    assert json.loads(path.read_text())["kind"] == record.RECORD_KIND


def test_save_is_atomic(cache, monkeypatch):
    """A failed write leaves the previous record whole and no temporary file behind."""
    path = record.save(TuningRecord(FP, [_cls(64, 1024, 1024, 16, SDPA)]))
    before = path.read_bytes()

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(SagebuildError, match="disk is full"):
        record.save(TuningRecord(FP, [_cls(128, 2048, 2048, 64, OURS)]))
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["sm90.json"]


@pytest.mark.parametrize(
    "text, why",
    [
        ("{", "not JSON"),
        ('{"kind": "other"}', "not a sagebuild tuning record"),
        ('{"kind": "sagebuild-tuning", "version": 99}', "record version 99"),
        ('{"kind": "sagebuild-tuning", "version": 1, "fingerprint": {}, "classes": []}', "malformed"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, text, why):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(record.TuningRecordError, match=why) as info:
        record.read(path)
    assert "\n" not in info.value.message and "sagebuild tune" in (info.value.fix or "")


def test_bad_config_in_a_record_is_refused(tmp_path):
    doc = TuningRecord(FP, [_cls(64, 1024, 1024, 16, Choice("ours", "fp16", "100,64,4,3"))]).to_dict()
    (tmp_path / "r.json").write_text(json.dumps(doc))
    with pytest.raises(record.TuningRecordError, match="BLOCK_M must be a power of two"):
        record.read(tmp_path / "r.json")


def test_fingerprint_mismatch_is_ignored_with_one_line_note(cache, monkeypatch, caplog):
    record.save(TuningRecord(FP, [_cls(64, 1024, 1024, 16, SDPA)]))
    here = replace(FP, torch="2.12.0+cu130")
    monkeypatch.setattr(record, "_machine_fingerprint", lambda arch: here)
    with caplog.at_level(logging.WARNING, logger="sagebuild.tuning"):
        assert record.tuned("sm90") is None
        assert record.tuned("sm90") is None  # noted once
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "torch 2.11.0+cu130 -> 2.12.0+cu130" in notes[0] and "sagebuild tune" in notes[0]
    assert "torch" in record.notes()["sm90"]
    monkeypatch.setattr(record, "_machine_fingerprint", lambda arch: FP)
    record.reload()
    assert record.tuned("sm90").classes[0].winner == SDPA


def test_unreadable_record_never_breaks_a_call(cache, caplog):
    (cache / "tuning").mkdir()
    (cache / "tuning" / "sm90.json").write_text("{ torn")
    with caplog.at_level(logging.WARNING, logger="sagebuild.tuning"):
        assert record.tuned("sm90") is None
    assert "not JSON" in caplog.records[0].getMessage()


def test_changed_file_is_reread_and_callbacks_run(cache, monkeypatch):
    monkeypatch.setattr(record, "_machine_fingerprint", lambda arch: FP)
    calls = []
    note = lambda: calls.append(1)  # noqa: E731
    record.on_reload(note)
    try:
        record.save(TuningRecord(FP, [_cls(64, 1024, 1024, 16, SDPA)]))
        assert record.tuned("sm90").classes[0].winner == SDPA
        n = len(calls)
        record.save(TuningRecord(FP, [_cls(64, 1024, 1024, 16, OURS), _cls(64, 2048, 2048, 16, OURS)]))
        assert len(record.tuned("sm90").classes) == 2
        assert len(calls) == n + 1
        record.reload()
        assert len(calls) == n + 2
    finally:
        record._callbacks.remove(note)  # the attention runtime's own callback stays


def test_key_buckets_split_at_the_geometric_mean():
    rec = TuningRecord(FP, [_cls(64, 1024, 1024, 16, SDPA), _cls(64, 4096, 4096, 16, OURS)])
    # sqrt(1024 * 4096) = 2048: up to it the 1024-key class, above it the 4096-key one
    assert rec.match(ShapeClass(64, 2048, 2048, 16, False)).winner == SDPA
    assert rec.match(ShapeClass(64, 2049, 2049, 16, False)).winner == OURS
    assert rec.match(ShapeClass(64, 16, 16, 1, False)).winner == SDPA  # below every class
    assert rec.match(ShapeClass(64, 65536, 65536, 16, False)).winner == OURS  # above every class
    assert rec.match(ShapeClass(64, 1024, 1024, 16, True)) is None  # causal: no class
    assert rec.match(ShapeClass(64, 1024, 1024, 16, False, masked=True)) is None


def test_head_dim_passes_follow_the_config_table():
    """Head dims pad as the table's rows do (40 -> 64); a split head dim (80 -> 64 + 32) takes
    classes keyed with its split width (96) first, then its padded width's (128)."""
    rec = TuningRecord(FP, [_cls(64, 1024, 1024, 16, SDPA), _cls(128, 1024, 1024, 16, OURS)])
    assert rec.match(ShapeClass(40, 1024, 1024, 16, False)).winner == SDPA
    assert rec.match(ShapeClass(80, 1024, 1024, 16, False)).winner == OURS  # no 96 class: the 128 ones
    rec.put(_cls(96, 1024, 1024, 16, SDPA))
    assert rec.match(ShapeClass(80, 1024, 1024, 16, False)).winner == SDPA
    assert rec.match(ShapeClass(100, 1024, 1024, 16, False)).winner == OURS  # 100 > 96: not split
    assert rec.match(ShapeClass(300, 1024, 1024, 16, False)) is None


def test_nearest_size_then_head_dim_within_a_bucket():
    rec = TuningRecord(FP, [
        _cls(64, 1024, 1024, 16, SDPA), _cls(64, 1024, 1024, 256, OURS),
        _cls(40, 4096, 4096, 16, OURS), _cls(64, 4096, 4096, 16, SDPA),
    ])  # fmt: skip
    assert rec.match(ShapeClass(64, 1024, 1024, 32, False)).winner == SDPA  # 2x from 16, 8x from 256
    assert rec.match(ShapeClass(64, 1024, 1024, 128, False)).winner == OURS
    assert rec.match(ShapeClass(40, 4096, 4096, 16, False)).winner == OURS  # same size: nearest head dim
    assert rec.match(ShapeClass(64, 4096, 4096, 16, False)).winner == SDPA


def test_lookup_puts_this_machines_class_before_the_shipped_one(cache):
    shape = ShapeClass(64, 1024, 1024, 16, False)  # the mission's small shape
    shipped = record.lookup("sm90", shape)
    assert shipped.winner.sdpa and "performance.md" in shipped.source
    record.install("sm90", TuningRecord(FP, [_cls(64, 1024, 1024, 16, OURS)]))
    assert record.lookup("sm90", shape).winner == OURS
    assert record.lookup("sm90", ShapeClass(64, 1024, 1024, 16, True)).source  # causal: shipped
    record.uninstall("sm90")
    assert record.lookup("sm90", shape) == shipped
    assert record.lookup("gfx1201", shape) is None  # RDNA4: nothing measured, nothing tuned
    assert record.lookup("interpreter", shape) is None


def test_shipped_hopper_classes_reproduce_the_measured_winners():
    """Every class of docs/performance.md's workload table matches its own measured winner."""
    rec = defaults.record_for("sm90")
    for c in rec.classes:
        assert rec.match(c.shape).winner == c.winner, c.shape.label()
    assert defaults.families() == ["Hopper"]


def test_fingerprint_differences_name_each_field():
    other = replace(FP, driver="nvidia 590.1", table="2026.12.07.1")
    assert FP.differences(other) == [
        "driver nvidia 580.159.04 -> nvidia 590.1",
        "table 2026.12.06.3 -> 2026.12.07.1",
    ]
    assert FP.differences(FP) == []


def test_fingerprint_current_without_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    with pytest.raises(record.TuningRecordError, match="no CUDA or ROCm GPU"):
        Fingerprint.current()


def test_record_dir_is_in_the_cache_dir(cache):
    assert record.record_path("gfx1201") == Path(cache) / "tuning" / "gfx1201.json"


def test_tuning_knob_off_ignores_the_file_not_an_installed_record(cache, monkeypatch):
    monkeypatch.setattr(record, "_machine_fingerprint", lambda arch: FP)
    record.save(TuningRecord(FP, [_cls(64, 1024, 1024, 16, OURS)]))
    shape = ShapeClass(64, 1024, 1024, 16, False)
    assert record.find("sm90", shape)[0] == "tuned"
    monkeypatch.setenv("SAGEBUILD_TUNING", "0")
    knobs.refresh()
    assert record.tuned("sm90") is None
    assert record.find("sm90", shape)[0] == "shipped"  # the shipped class: SDPA at the mission's shape
    record.install("sm90", TuningRecord(FP, [_cls(64, 1024, 1024, 16, OURS)]))
    assert record.find("sm90", shape)[0] == "tuned"


def test_a_few_tuned_shapes_leave_the_shipped_classes_in_force_elsewhere(cache):
    """A record that measured only short calls does not stretch its buckets over the long shapes
    the shipped data measured: tuned and shipped classes are matched as one set."""
    record.install("sm90", TuningRecord(FP, [_cls(64, 4096, 4096, 16, SDPA), _cls(64, 1024, 1024, 16, OURS)]))
    assert record.find("sm90", ShapeClass(64, 4096, 4096, 16, False)) == (
        "tuned",
        _cls(64, 4096, 4096, 16, SDPA),
    )
    assert (
        record.find("sm90", ShapeClass(64, 1024, 1024, 16, False))[1].winner == OURS
    )  # replaced the shipped SDPA
    origin, long = record.find("sm90", ShapeClass(64, 8192, 8192, 128, False))  # 4x32x8192x64: 1.28x shipped
    assert origin == "shipped" and not long.winner.sdpa
    origin, sdxl = record.find("sm90", ShapeClass(64, 4096, 77, 20, False))  # the shipped SDXL class
    assert origin == "shipped" and sdxl.winner.sdpa
