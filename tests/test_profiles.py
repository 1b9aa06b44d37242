"""Bundled profiles, their schema errors, auto-matching, and ``sagebuild profiles`` list/show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakeroots import ENV, add_tool_output, make_cpu_only, make_nvidia, make_rdna4_native
from typer.testing import CliRunner

from sagebuild import archs, profiles
from sagebuild.cli.app import app
from sagebuild.cli.profiles_cmd import show_yaml
from sagebuild.errors import SagebuildError

runner = CliRunner()


def flat(text: str) -> str:
    """Rich wraps long lines on the console; compare with whitespace collapsed."""
    return " ".join(text.split())


BUNDLED = {
    "rdna4-rocm6": {"gfx1200", "gfx1201"},
    "rdna3-rocm6": {"gfx1100", "gfx1101", "gfx1102"},
    "cdna3-rocm6": {"gfx942"},
    "cdna2-rocm6": {"gfx90a"},
    "ampere-cu12": {"sm80", "sm86"},
    "ada-cu12": {"sm89"},
    "hopper-cu12": {"sm90"},
    "blackwell-cu12": {"sm100", "sm120"},
    "cpu": set(),
}


def test_bundled_profiles_cover_the_issue_list() -> None:
    loaded = {p.name: p for p in profiles.load_all()}
    assert set(loaded) == set(BUNDLED)
    for name, want in BUNDLED.items():
        p = loaded[name]
        assert set(p.archs) == want
        assert all(archs.get(a).vendor == p.vendor for a in p.archs)
        assert p.torch_install.startswith("pip install") and "--index-url" in p.torch_install
        assert p.kernels and set(p.accuracy) == set(p.kernels)


@pytest.mark.parametrize(
    ("detected", "name"),
    [
        (["gfx1201"], "rdna4-rocm6"),
        (["gfx942:sramecc+:xnack-"], "cdna3-rocm6"),
        (["sm90"], "hopper-cu12"),
        (["8.9"], "ada-cu12"),
        (["gfx1030"], "cpu"),
        ([], "cpu"),
    ],
)
def test_match(detected: list[str], name: str) -> None:
    p, why = profiles.match(detected)
    assert p.name == name and why.startswith("auto")


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda d: d.pop("vendor"), "vendor"),
        (lambda d: d.update(vendor="intel"), "vendor"),
        (lambda d: d.update(archs=["gfx9999"]), "archs"),
        (lambda d: d.update(archs=["sm90"]), "archs"),
        (lambda d: d["versions"].update(torch=">=two"), "versions.torch"),
        (lambda d: d["build"].update(mem_per_job_gb="lots"), "build.mem_per_job_gb"),
        (lambda d: d.update(kernels=["qk_int4"]), "kernels"),
        (lambda d: d.update(colour="red"), "colour"),
    ],
)
def test_schema_errors_name_file_and_key(tmp_path: Path, edit, key: str) -> None:
    import yaml

    d = yaml.safe_load(show_yaml(profiles.load_bundled("rdna4-rocm6")))
    edit(d)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(SagebuildError) as e:
        profiles.load_file(path)
    assert str(path) in e.value.message and f"'{key}'" in e.value.message
    r = runner.invoke(app, ["profiles", "show", str(path)])
    assert r.exit_code == 2 and "Traceback" not in r.output and f"'{key}'" in flat(r.stderr)


def test_list_marks_cpu_without_gpu(tmp_path: Path) -> None:
    r = runner.invoke(app, ["profiles", "--json", "--root", str(make_cpu_only(tmp_path))], env=ENV)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    assert {p["name"] for p in doc["profiles"]} == set(BUNDLED)
    assert [p["name"] for p in doc["profiles"] if p["matches"]] == ["cpu"] == [doc["match"]]
    assert "no GPU" in doc["why"]


def test_list_marks_rdna4_from_kfd(tmp_path: Path) -> None:
    r = runner.invoke(
        app, ["profiles", "--json", "--root", str(make_rdna4_native(tmp_path, rocminfo=False))], env=ENV
    )
    doc = json.loads(r.stdout)
    assert doc["match"] == "rdna4-rocm6" and doc["detected_archs"] == ["gfx1201"]
    r = runner.invoke(app, ["profiles", "--root", str(make_rdna4_native(tmp_path, name="r2"))], env=ENV)
    assert r.exit_code == 0 and r.stdout == ""
    assert "rdna4-rocm6: auto: GPU arch gfx1201" in flat(r.stderr)


def test_list_marks_hopper_from_nvidia_smi(tmp_path: Path) -> None:
    root = make_nvidia(tmp_path)
    r = runner.invoke(app, ["profiles", "--json", "--root", str(root)], env=ENV)
    assert json.loads(r.stdout)["match"] == "hopper-cu12"
    add_tool_output(root, "usr/bin/nvidia-smi", "550.54.14, 8.6")
    r = runner.invoke(app, ["profiles", "--json", "--root", str(root)], env=ENV)
    assert json.loads(r.stdout)["match"] == "ampere-cu12"


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_show_yaml_round_trips(tmp_path: Path, name: str) -> None:
    r = runner.invoke(app, ["profiles", "show", name])
    assert r.exit_code == 0
    path = tmp_path / f"{name}.yaml"
    path.write_text(r.stdout)
    assert profiles.load_file(path) == profiles.load_bundled(name)


def test_show_json_and_errors(tmp_path: Path) -> None:
    r = runner.invoke(app, ["profiles", "show", "hopper-cu12", "--json"])
    doc = json.loads(r.stdout)
    assert doc["profile"]["name"] == "hopper-cu12" and doc["profile"]["archs"] == ["sm90"]
    r = runner.invoke(app, ["profiles", "show", "nope"])
    assert (
        r.exit_code == 2
        and "no bundled profile named 'nope'" in flat(r.stderr)
        and "rdna4-rocm6" in flat(r.stderr)
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    r = runner.invoke(app, ["profiles", "show", str(broken)])
    assert r.exit_code == 2 and "not valid YAML" in flat(r.stderr) and "line" in flat(r.stderr)
