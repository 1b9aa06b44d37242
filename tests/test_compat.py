"""``sagebuild compat``: a real ``sageattention`` distribution in a throwaway venv (CPU, no torch
needed to install). The venv sees this environment's packages (sagebuild, torch) through a .pth
that adds our site-packages as a site dir, and has its own purelib for the install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from sagebuild.compat import contents

HERE_SITE = sysconfig.get_paths()["purelib"]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / "bin" / "python"
    site = _site(py)
    (site / "sagebuild-parent.pth").write_text(f"import site; site.addsitedir({HERE_SITE!r})\n")
    return py


def _site(py: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.check_output([py, "-c", code], text=True).strip())


def _sagebuild(py: Path, *args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SAGEBUILD_CACHE_DIR": str(cache)}
    return subprocess.run(
        [py, "-m", "sagebuild", "compat", *args], capture_output=True, text=True, env=env, cwd=cache
    )


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_record_lists_every_file_with_its_sha256():
    files = contents.files()
    rec = contents.record(files).decode().splitlines()
    assert rec[-1] == f"{contents.DIST_INFO}/RECORD,,"
    rows = dict((r.split(",")[0], r.split(",")[1:]) for r in rec[:-1])
    assert set(rows) == set(files)
    import base64
    import hashlib

    for path, (digest, size) in rows.items():
        want = base64.urlsafe_b64encode(hashlib.sha256(files[path]).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={want}" and int(size) == len(files[path])
    assert contents.DIST_VERSION.startswith("2.2.0+sagebuild.")
    assert contents.local_label("0.2.0.dev3+g12ab") == "0.2.0.dev3.g12ab"


def test_install_status_then_pip_uninstall(venv, tmp_path):
    """diffusers' gate (installed distribution >= 2.1.1 by packaging) passes; the six names and
    sageattention.core import; pip removes every file."""
    st = _json(_sagebuild(venv, "status", "--json", cache=tmp_path))
    assert st["whose"] is None and st["version"] is None
    res = _json(_sagebuild(venv, "install", "--json", cache=tmp_path))
    assert res["installed"] == contents.DIST_VERSION and not res["shadowed"]
    assert res["status"]["whose"] == "sagebuild" and res["status"]["version"] == contents.DIST_VERSION
    code = (
        "import importlib.metadata as md, sageattention\n"
        "from packaging.version import parse\n"
        "from sageattention import (sageattn, sageattn_qk_int8_pv_fp8_cuda,\n"
        "    sageattn_qk_int8_pv_fp8_cuda_sm90, sageattn_qk_int8_pv_fp16_cuda,\n"
        "    sageattn_qk_int8_pv_fp16_triton, sageattn_varlen)\n"
        "from sageattention.core import sageattn_qk_int8_pv_fp8_cuda as core_fp8\n"
        "import sagebuild.attention.functions as f\n"
        "assert sageattn is f.sageattn and core_fp8 is f.sageattn_qk_int8_pv_fp8_cuda\n"
        "assert parse(md.version('sageattention')) >= parse('2.1.1')\n"
        "print(md.version('sageattention'), sageattention.__provider__)\n"
    )
    out = subprocess.run([venv, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [contents.DIST_VERSION, "sagebuild"]
    site = _site(venv)
    # reinstalling replaces our own install in place
    again = _json(_sagebuild(venv, "install", "--json", cache=tmp_path))
    assert again["replaced_ours"] == [contents.DIST_VERSION]
    pip_cmd = [sys.executable, "-m", "pip", "--python", str(venv), "uninstall", "-y", "sageattention"]
    pip = subprocess.run(pip_cmd, capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    assert sorted(p.name for p in site.iterdir()) == ["sagebuild-parent.pth"]


def _fake_upstream(site: Path) -> None:
    """An upstream-like install: package, dist-info, RECORD, installed by pip."""
    files = {
        "sageattention/__init__.py": b"from .core import sageattn\n",
        "sageattention/core.py": b"def sageattn(*a, **k):\n    return 'upstream'\n",
        "sageattention-2.2.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: sageattention\nVersion: 2.2.0\n"
        ),
        "sageattention-2.2.0.dist-info/INSTALLER": b"pip\n",
    }
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    rec = "".join(f"{rel},{contents.record_hash(d)},{len(d)}\n" for rel, d in files.items())
    rec += "sageattention-2.2.0.dist-info/RECORD,,\n"
    (site / "sageattention-2.2.0.dist-info/RECORD").write_text(rec)


def test_upstream_is_refused_then_backed_up_with_force_and_restored(venv, tmp_path):
    site = _site(venv)
    _fake_upstream(site)
    st = _json(_sagebuild(venv, "status", "--json", cache=tmp_path))
    assert st["whose"] == "upstream" and st["version"] == "2.2.0"
    refused = _sagebuild(venv, "install", cache=tmp_path)
    assert refused.returncode == 2 and "--force" in refused.stderr and "Traceback" not in refused.stderr
    assert (site / "sageattention/core.py").read_text().endswith("'upstream'\n")  # untouched
    res = _json(_sagebuild(venv, "install", "--force", "--json", cache=tmp_path))
    assert res["status"]["whose"] == "sagebuild" and len(res["backups"]) == 1
    backup = Path(res["backups"][0])
    assert (backup / "files/sageattention/core.py").is_file() and str(tmp_path) in str(backup)
    assert not (site / "sageattention-2.2.0.dist-info").exists()
    text = _sagebuild(venv, "remove", cache=tmp_path)
    assert text.returncode == 0 and "--restore" in text.stdout
    reinstalled = _json(_sagebuild(venv, "install", "--json", cache=tmp_path))
    assert reinstalled["status"]["whose"] == "sagebuild"
    back = _json(_sagebuild(venv, "remove", "--restore", "--json", cache=tmp_path))
    assert back["removed"] == [contents.DIST_VERSION] and back["restored"]["version"] == "2.2.0"
    assert back["status"]["whose"] == "upstream" and back["status"]["version"] == "2.2.0"
    assert (site / "sageattention/core.py").read_text().endswith("'upstream'\n")
    for p in list(site.iterdir()):  # leave the module's venv as the other tests expect it
        if p.name.startswith("sageattention"):
            import shutil

            shutil.rmtree(p)


def test_remove_when_nothing_is_installed_says_so(venv, tmp_path):
    res = _json(_sagebuild(venv, "remove", "--json", cache=tmp_path))
    assert res["removed"] == [] and res["restored"] is None
    refused = _sagebuild(venv, "remove", "--restore", cache=tmp_path)
    assert refused.returncode == 2 and "no backup" in refused.stderr


def test_remove_restore_without_a_backup_removes_nothing(venv, tmp_path):
    """Backups live in the cache folder, which users clear: --restore with none there is refused
    before sagebuild's sageattention is removed (issue 60)."""
    _json(_sagebuild(venv, "install", "--json", cache=tmp_path))
    (tmp_path / "a-fresh-cache").mkdir()
    refused = _sagebuild(venv, "remove", "--restore", cache=tmp_path / "a-fresh-cache")
    assert (
        refused.returncode == 2 and "no backup" in refused.stderr and "nothing was removed" in refused.stderr
    )
    assert _json(_sagebuild(venv, "status", "--json", cache=tmp_path))["whose"] == "sagebuild"
    assert _json(_sagebuild(venv, "remove", "--json", cache=tmp_path))["removed"] == [contents.DIST_VERSION]


def test_status_answers_on_stdout(venv, tmp_path):
    st = _sagebuild(venv, "status", cache=tmp_path)
    assert st.returncode == 0 and "site-packages:" in st.stdout and "imports:" in st.stdout, st.stdout


@pytest.mark.parametrize("where", ["elsewhere", "checkout"])
def test_a_python_without_sagebuild_is_refused(tmp_path, where):
    """Also from inside a sagebuild checkout, whose sources the current directory would lend the
    pre-check (issue 60)."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = {**os.environ, "SAGEBUILD_CACHE_DIR": str(tmp_path)}
    checkout = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "sagebuild", "compat", "install", "--python", str(bare / "bin" / "python")],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout if where == "checkout" else tmp_path,
    )
    assert proc.returncode == 2 and "cannot import sagebuild" in proc.stderr
    assert not any(p.name.startswith("sageattention") for p in _site(bare / "bin" / "python").iterdir())
