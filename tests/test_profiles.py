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
    assert r.exit_code == 0 and r.stderr == ""  # the table is the answer: stdout, so `| grep` finds it
    assert "rdna4-rocm6: auto: GPU arch gfx1201" in flat(r.stdout)


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


# ---- hostile profile files (issue 37): bounded, clear errors, never a hang or a traceback ----


def _bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    import time

    from sagebuild.errors import SagebuildError
    from sagebuild.profiles import load_file

    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())
    assert path.stat().st_size < 1024
    t0 = time.monotonic()
    with pytest.raises(SagebuildError, match="aliases"):
        load_file(path)
    assert time.monotonic() - t0 < 2


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not UTF-8"),
        (b"name: x\x00\n", "NUL"),
        (b"a: " + b"x" * 300_000, "at most"),
    ],
)
def test_binary_or_huge_profile_is_a_clear_error(tmp_path, content, needle):
    from sagebuild.errors import Exit, SagebuildError
    from sagebuild.profiles import load_file

    path = tmp_path / "p.yaml"
    path.write_bytes(content)
    with pytest.raises(SagebuildError, match=needle) as info:
        load_file(path)
    assert info.value.code == Exit.USAGE


def test_fifo_profile_is_refused_without_blocking(tmp_path):
    import os

    from sagebuild.errors import SagebuildError
    from sagebuild.profiles import load_file

    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SagebuildError, match="not a regular file"):
        load_file(fifo)


@pytest.mark.parametrize("key", ["heads", "batch", "head_dim", "reps"])
def test_bench_sizes_must_be_at_least_one(key):
    from sagebuild.profiles import ProfileError, load_bundled, parse

    doc = load_bundled("cpu").to_dict()
    doc.pop("source", None)
    doc["bench"][key] = 0
    with pytest.raises(ProfileError, match=f"bench.{key}"):
        parse(doc, "test.yaml")


@pytest.mark.parametrize(
    ("key", "value"), [("reps", "x"), ("reps", 2.5), ("warmup", "x"), ("regression", "x")]
)
def test_bench_numbers_of_the_wrong_type_are_a_profile_error(key, value):
    """Not a raw ValueError from int()/float(): the profile error names the field."""
    from sagebuild.profiles import ProfileError, load_bundled, parse

    doc = load_bundled("cpu").to_dict()
    doc.pop("source", None)
    doc["bench"][key] = value
    with pytest.raises(ProfileError, match=f"bench.{key}"):
        parse(doc, "test.yaml")


def test_docs_profiles_md_shows_the_bundled_profiles_as_they_are():
    """docs/profiles.md's table is ``profiles.markdown_table`` of the bundled YAML files: a changed
    profile (its kernels, pins or speed record) without the doc fails here."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "profiles.md").read_text(encoding="utf-8")
    table = profiles.markdown_table(profiles.load_all())
    assert table in doc, "docs/profiles.md's bundled-profiles table is stale: paste profiles.markdown_table()"
    hopper = next(line for line in table.splitlines() if line.startswith("| `hopper-cu12`"))
    assert "0.85 of sm90: 1x16x4096x64 0.95×" in hopper and "qk_int8_pv_fp8" in hopper, hopper


def test_bench_expectations_record_cross_attention_and_gqa_shapes():
    """``bench.expected`` takes the keys ``sagebuild bench --kv-seq/--kv-heads`` time under (so a
    profile can gate SDXL's text keys), and still refuses a malformed one, naming the forms."""
    from sagebuild.profiles import ProfileError, load_bundled, parse, shape_key

    doc = load_bundled("cpu").to_dict()
    doc.pop("source", None)
    sdxl, gqa = shape_key(2, 10, 4096, 64, False, kv_seq=77), shape_key(1, 32, 4096, 128, True, kv_heads=8)
    doc["bench"]["expected"] = {"sm90": {"measured": "test", "speedup": {sdxl: 0.76, gqa: 1.2}}}
    assert parse(doc, "test.yaml").bench.expected["sm90"].speedup == {sdxl: 0.76, gqa: 1.2}
    doc["bench"]["expected"]["sm90"]["speedup"] = {"2x10x4096:x64": 1.0}
    with pytest.raises(ProfileError, match="N:Nk for keys"):
        parse(doc, "test.yaml")
