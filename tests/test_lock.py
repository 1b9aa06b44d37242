"""The lockfile: same environment → same bytes, round trip, drift named and exit 50, bad files exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sagebuild import lock as lk
from sagebuild.cli.app import app
from sagebuild.errors import SagebuildError
from sagebuild.profiles import load_bundled

runner = CliRunner()


def _env(**over):
    facts = {
        "python": {"version": "3.11.7"},
        "system": {"os": "Linux", "kernel": "6.8.0", "wsl": "none"},
        "torch": {
            "version": "2.11.0+cu130",
            "build": "cuda",
            "hip": None,
            "cuda": "13.0",
            "devices": [{"index": 0, "name": "NVIDIA H200", "arch": "sm90"}],
            "triton": {"distribution": "triton", "version": "3.6.0"},
        },
        "gpu_archs": ["sm90"],
        "tools": {
            "nvcc": {"present": True, "version": "13.0"},
            "c++": {"present": True, "version": "13.3"},
            "nvidia-smi": {"present": True, "version": "580.65"},
        },
    }
    facts.update(over)
    dists = {
        "numpy": {"version": "2.1.0"},
        "torch": {"version": "2.11.0+cu130"},
        "sagebuild": {"version": "0.1.0", "source": "editable"},
    }
    info = {"torch": "2.11.0+cu130", "archs": ["sm90"], "sha256": "ab" * 32}
    return lk.snapshot(facts, load_bundled("hopper-cu12"), info, dists)


def test_torch_index_url_from_local_tag():
    assert lk.torch_index_url("2.11.0+cu130") == "https://download.pytorch.org/whl/cu130"
    assert lk.torch_index_url("2.9.1+rocm6.4") == "https://download.pytorch.org/whl/rocm6.4"
    assert lk.torch_index_url("2.13.0+cpu") == "https://download.pytorch.org/whl/cpu"
    assert lk.torch_index_url("2.13.0") is None
    assert lk.torch_index_url("2.13.0+gitabc123") is None


def test_render_is_canonical_and_round_trips(tmp_path: Path):
    a, b = _env(), _env()
    assert lk.render(a) == lk.render(b)
    path, req = lk.write(a, tmp_path / "x.lock")
    assert lk.load(path) == json.loads(lk.render(a))
    assert lk.diff(lk.load(path), a) == []
    text = req.read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cu130" in text
    assert "numpy==2.1.0\n" in text and "torch==2.11.0+cu130\n" in text
    assert "\nsagebuild==" not in text  # an editable install cannot be reinstalled from an index


def test_diff_names_every_kind_of_drift():
    locked = _env()
    now = _env(
        torch={
            "version": "2.11.0+rocm6.4",
            "build": "rocm",
            "hip": "6.4",
            "cuda": None,
            "devices": [{"index": 0, "name": "MI300X", "arch": "gfx942"}],
            "triton": {"distribution": "pytorch-triton-rocm", "version": "3.6.0"},
        },
        gpu_archs=["gfx942"],
    )
    now["distributions"]["numpy"] = {"version": "2.2.0"}
    del now["distributions"]["torch"]
    now["distributions"]["scipy"] = {"version": "1.14"}
    now["artefacts"][0]["sha256"] = "cd" * 32
    text = [str(d) for d in lk.diff(locked, now)]
    assert "package numpy: 2.1.0 → 2.2.0" in text
    assert "torch version: 2.11.0+cu130 → 2.11.0+rocm6.4" in text
    # each drift once: the torch upgrade is not also a package line or an index-URL line
    assert not any(t.startswith(("package torch:", "torch index_url:")) for t in text)
    assert "package scipy: added (1.14)" in text
    assert "torch build: cuda → rocm" in text
    assert "triton distribution: triton → pytorch-triton-rocm" in text
    assert any(t.startswith("gpu archs:") and "gfx942" in t for t in text)
    assert any(t.startswith("artefact ") and "sha256" in t for t in text)


def test_cli_lock_deterministic_check_and_drift(tmp_path: Path):
    one, two = tmp_path / "one.lock", tmp_path / "two.lock"
    r1 = runner.invoke(app, ["lock", "--out", str(one), "--profile", "cpu"])
    r2 = runner.invoke(app, ["lock", "--out", str(two), "--profile", "cpu"])
    assert r1.exit_code == 0, r1.output
    assert r2.exit_code == 0, r2.output
    assert one.read_bytes() == two.read_bytes()
    assert (tmp_path / "one.lock.requirements.txt").is_file()

    ok = runner.invoke(app, ["lock", "--check", str(one)])
    assert ok.exit_code == 0, ok.output
    assert "no drift" in ok.output

    doc = json.loads(one.read_text())
    doc["distributions"]["pyyaml"]["version"] = "0.0.1"
    one.write_text(json.dumps(doc))
    bad = runner.invoke(app, ["lock", "--check", str(one), "--json"])
    assert bad.exit_code == 50, bad.output
    drift = json.loads(bad.stdout)["drift"]
    assert [d["key"] for d in drift] == ["pyyaml"]
    assert drift[0]["locked"] == "0.0.1" and drift[0]["change"] == "changed"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "invalid JSON"),
        ('{"name": "some-package", "version": "1.0"}', "marker"),
        ("[1, 2, 3]", "marker"),
        (json.dumps({"lock": "sagebuild-lock", "version": 99}), "version 99"),
        (json.dumps({"lock": "sagebuild-lock", "version": 1, "python": {}}), "section"),
    ],
)
def test_malformed_or_foreign_lockfile_is_a_clear_error(tmp_path: Path, content: str, needle: str):
    f = tmp_path / "bad.lock"
    f.write_text(content)
    with pytest.raises(SagebuildError, match=needle):
        lk.load(f)
    r = runner.invoke(app, ["lock", "--check", str(f)])
    assert r.exit_code == 2
    assert needle in r.output and "Traceback" not in r.output


def test_missing_lockfile_exit_2(tmp_path: Path):
    r = runner.invoke(app, ["lock", "--check", str(tmp_path / "nope.lock")])
    assert r.exit_code == 2 and "cannot read lockfile" in r.output


def test_lock_records_no_time_and_no_path_dependent_tools():
    """An identical rebuild (new build time, duration, job count, ninja) and a venv activation
    (another ninja or c++ on PATH) do not drift the lock."""
    info = {
        "sha256": "ab" * 32,
        "archs": ["sm90"],
        "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "hip": None, "git": "abc"},
        "built_at": "2026-01-01T00:00:00+00:00",
        "seconds": 81.2,
        "jobs": 8,
        "compilers": {"c++": "g++ 13.3", "ninja": "1.11.1", "nvcc": "13.0"},
        "python": {"executable": "/venv/a/bin/python"},
    }
    facts = {"tools": {"ninja": {"present": True, "version": "1.11.1"}}}
    a = lk.snapshot(facts, None, info, {"numpy": {"version": "2.1.0"}})
    rebuilt = {
        **info,
        "built_at": "2026-02-02T10:00:00+00:00",
        "seconds": 79.9,
        "jobs": 4,
        "compilers": {**info["compilers"], "ninja": "1.13.2"},
        "python": {"executable": "/venv/b/bin/python"},
    }
    activated = {"tools": {"ninja": {"present": True, "version": "1.13.2"}}}
    b = lk.snapshot(activated, None, rebuilt, {"numpy": {"version": "2.1.0"}})
    assert lk.render(a) == lk.render(b)
    assert lk.diff(a, b) == []
    text = lk.render(a)
    assert "built_at" not in text and "seconds" not in text and "ninja" not in text
    assert a["compilers"] == {"c++": "g++ 13.3", "nvcc": "13.0"}
    assert a["artefacts"][0]["build"]["torch"] == info["torch"]
    # a lock written with build times (older sagebuild) still checks clean against the same build
    old = json.loads(text)
    old["artefacts"][0]["build"]["built_at"] = "2025-01-01"
    assert lk.diff(old, b) == []


def test_other_interpreter_is_locked_from_its_own_environment(tmp_path: Path):
    """``current(python=X)`` takes X's distributions (read by X), not sagebuild's interpreter's."""
    import sys
    import venv

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = next((env_dir / "lib").glob("python*/site-packages"))
    dist = site / "only_in_x-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: only-in-x\nVersion: 1.2.3\n")
    doc = lk.current(None, facts={"python": {"version": "3.11"}}, python=str(py))
    assert doc["distributions"].get("only-in-x") == {"version": "1.2.3"}
    assert "typer" not in doc["distributions"]  # sagebuild's own environment is not what was locked
    assert str(py) != sys.executable


def test_lock_hashes_the_library_on_disk_beside_its_build_record(tmp_path: Path, monkeypatch):
    """The build record (as ``build.run`` writes it) names no path; the lock hashes the library in
    the same build directory, so a library changed after its build drifts from the lock."""
    from types import SimpleNamespace

    from sagebuild.build import paths, run
    from sagebuild.fsio import sha256_file

    monkeypatch.setattr(run, "compiler_versions", lambda vendor: {"c++": "g++ 13.3"})
    ext = tmp_path / "ext"
    lib = paths.current_lib(ext)
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"the verified build")
    plan = SimpleNamespace(profile="cpu", vendor="cpu", archs=[], arch_env=None, env={}, python="python")
    info = run._build_info(plan, lib, {"ops": ["k_mean"], "dispatch_keys": ["CPU"]}, 1, False, 1.0)
    paths.current_info(ext).write_text(json.dumps(info), encoding="utf-8")
    facts = {"python": {"version": "3.11"}, "extension": {"dir": str(ext)}}
    locked = lk.current(None, facts=facts)
    assert locked["artefacts"][0]["name"] == "sagebuild_ext"
    assert locked["artefacts"][0]["sha256"] == info["sha256"]

    lib.write_bytes(b"overwritten after the build")
    now = lk.current(None, facts=facts)
    assert now["artefacts"][0]["sha256"] == sha256_file(lib) != info["sha256"]
    assert [str(d) for d in lk.diff(locked, now) if d.kind == "artefact"] == [
        f"artefact sagebuild_ext sha256: {info['sha256']} → {sha256_file(lib)}"
    ]
    lib.unlink()  # no library on disk: the hash the build recorded
    assert lk.current(None, facts=facts)["artefacts"][0]["sha256"] == info["sha256"]


def test_lock_names_the_tuning_record_and_check_reports_its_drift(tmp_path: Path, monkeypatch):
    """None yet, then its hash; a re-tuned (or deleted) record is drift; a lock written before
    tuning records were locked compares none."""
    from sagebuild.tuning import record

    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path / "cache"))
    before = _env()
    assert before["tuning"] == {"sm90": None}
    fp = record.Fingerprint("NVIDIA H200", "sm90", "", "cuda 13.0", "2.11.0+cu130", "3.6.0", "0.1.0", "t")
    rec = record.TuningRecord(
        fp, [record.TunedClass(record.ShapeClass(64, 1024, 1024, 16, False), record.Choice("sdpa"))]
    )
    path = record.save(rec)
    tuned = _env()
    assert tuned["tuning"] == {"sm90": lk.sha256_file(path)} and str(tmp_path) not in lk.render(tuned)
    (added,) = lk.diff(before, tuned)
    assert (added.kind, added.key, added.change) == ("tuning", "record sm90", "added")
    rec.put(record.TunedClass(record.ShapeClass(128, 4096, 4096, 64, False), record.Choice("ours", ms=1.0)))
    record.save(rec)
    (changed,) = lk.diff(tuned, _env())
    assert changed.change == "changed" and str(changed).startswith("tuning record sm90: ")
    path.unlink()
    assert lk.diff(tuned, _env())[0].change == "removed"
    older = {k: v for k, v in tuned.items() if k != "tuning"}
    assert lk.diff(older, _env()) == []
