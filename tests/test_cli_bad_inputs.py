"""Hostile and mistaken input, table-driven, through the real CLI in a subprocess (issue 37).

Every case must end with a documented exit code (docs/ci.md), print no Python traceback, stay
within a time and an address-space limit, and leave the files already there unchanged. A case
with ``--json`` must still print one JSON document on stdout.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

TIME_LIMIT_S = 90
ADDRESS_SPACE = 6 * 2**30  # far below what reading /dev/zero or a 24 GB bench would take
DOCUMENTED = {0, 1, 2, 3, 10, 20, 30, 40, 50, 130, 141, 143}


def _bomb(d: Path) -> Path:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{'abcdefghi'[i]}"] * 9) + "]")
    p = d / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _binary(d: Path) -> Path:
    p = d / "binary.yaml"
    p.write_bytes(bytes(range(256)) * 4)
    return p


def _fifo(d: Path) -> Path:
    p = d / "fifo.yaml"
    os.mkfifo(p)
    return p


def _users_files(d: Path) -> Path:
    """A job's folder that already holds files named as accept's and bench's outputs."""
    for name in ("build.log", "report.json", "junit.xml", "notes.txt"):
        (d / name).write_text(f"the user's {name}\n")
    return d


ASCII_ONLY = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}


def _cli(*parts: str | Callable[[Path], object]) -> Callable[[Path], list[str]]:
    """A command line whose callable parts make a file in the case's folder and give its path."""
    return lambda d: [str(p(d)) if callable(p) else p for p in parts]


def _profile(old: str, new: str) -> Callable[[Path], Path]:
    """The bundled cpu profile with one line changed, as a user's file."""

    def write(d: Path) -> Path:
        text = (TESTS.parent / "profiles" / "cpu.yaml").read_text(encoding="utf-8")
        assert old in text, old
        (d / "mine.yaml").write_text(text.replace(old, new, 1), encoding="utf-8")
        return d / "mine.yaml"

    return write


_LOCK_SECTIONS = {
    k: {} for k in ("python", "platform", "torch", "triton", "gpu", "compilers", "distributions")
}


def _lock(text: str) -> Callable[[Path], Path]:
    """A lockfile whose sections are well-formed but for ``text``, a JSON fragment (or a whole file)."""

    def write(d: Path) -> Path:
        base = json.dumps({"lock": "sagebuild-lock", "version": 1, **_LOCK_SECTIONS})
        body = text if text.startswith("[") else base[:-1] + ", " + text + "}"
        (d / "bad.lock").write_text(body, encoding="utf-8")
        return d / "bad.lock"

    return write


def _file(d: Path) -> Path:
    p = d / "existing.txt"
    p.write_text("keep me\n")
    return p


@dataclass
class Case:
    id: str
    args: Callable[[Path], list[str]]
    codes: set[int]
    env: dict[str, str] = field(default_factory=dict)
    json_doc: bool = False
    stderr_has: str = ""
    in_work: bool = False  # run in a folder of the user's files named as our outputs (else beside it)
    no_output: str = ""  # text no output may contain (an internal error's words)
    stdout_has: str = ""  # a failed step's verdict (then no error/fix lines are expected)


CASES = [
    Case("explain-dev-zero", lambda d: ["explain", "/dev/zero"], {0}),
    Case("explain-missing", lambda d: ["explain", str(d / "nope.log")], {2}, stderr_has="not found"),
    Case("explain-directory", lambda d: ["explain", str(d)], {2}, stderr_has="directory"),
    Case("profile-alias-bomb", lambda d: ["profiles", "show", str(_bomb(d))], {2}, stderr_has="aliases"),
    Case("profile-binary", lambda d: ["profiles", "show", str(_binary(d))], {2}, stderr_has="UTF-8"),
    Case("profile-fifo", lambda d: ["profiles", "show", str(_fifo(d))], {2}, stderr_has="regular file"),
    Case("profile-bomb-json", lambda d: ["profiles", "show", str(_bomb(d)), "--json"], {2}, json_doc=True),
    Case("doctor-profile-bomb", lambda d: ["doctor", "--profile", str(_bomb(d))], {2}),
    Case(
        "bench-huge-head-dim",
        lambda d: ["bench", "--profile", "cpu", "--head-dim", "100000"],
        {3},
        stderr_has="refused",
    ),
    Case("bench-huge-seq", lambda d: ["bench", "--profile", "cpu", "--seq", "10000000"], {3}),
    Case("bench-absent-gpu", lambda d: ["bench", "--profile", "cpu", "--device", "cuda:7"], {3}),
    Case(
        "bench-absent-gpu-json",
        lambda d: ["bench", "--profile", "cpu", "--device", "cuda:7", "--json"],
        {3},
        json_doc=True,
    ),
    Case("bench-bad-device", lambda d: ["bench", "--profile", "cpu", "--device", "gpu9"], {2}),
    Case("verify-absent-gpu", lambda d: ["verify", "--profile", "cpu", "--device", "cuda:7"], {3}),
    Case("verify-bad-device", lambda d: ["verify", "--profile", "cpu", "--device", "gpu9"], {2}),
    Case("verify-huge-shape", lambda d: ["verify", "--profile", "cpu", "--shape", "1,8,10000000,64"], {3}),
    Case("lock-out-proc", lambda d: ["lock", "--profile", "cpu", "--out", "/proc/x.lock"], {2}),
    Case(
        "lock-out-directory",
        lambda d: ["lock", "--profile", "cpu", "--out", str(d)],
        {2},
        stderr_has="directory",
    ),
    Case("lock-check-missing", lambda d: ["lock", "--check", str(d / "none.lock")], {2}),
    Case("lock-check-binary", lambda d: ["lock", "--check", str(_binary(d))], {2}),
    Case("accept-out-is-file", lambda d: ["accept", "--profile", "cpu", "--out", str(_file(d))], {2}),
    Case(
        "accept-out-below-file", lambda d: ["accept", "--profile", "cpu", "--out", str(_file(d) / "run")], {2}
    ),
    Case("accept-out-proc", lambda d: ["accept", "--profile", "cpu", "--out", "/proc/sagebuild-run"], {2}),
    Case(
        "accept-out-proc-json",
        lambda d: ["accept", "--profile", "cpu", "--out", "/proc/x", "--json"],
        {2},
        json_doc=True,
    ),
    Case("compile-log-proc", lambda d: ["compile", "--profile", "cpu", "--log", "/proc/x.log"], {2}),
    Case(
        "compile-cache-dir-proc",
        lambda d: ["compile", "--profile", "cpu"],
        {2},
        env={"SAGEBUILD_CACHE_DIR": "/proc/junk"},
    ),
    Case(
        "compile-ext-dir-dev-null",
        lambda d: ["compile", "--profile", "cpu"],
        {2},
        env={"SAGEBUILD_EXT_DIR": "/dev/null"},
    ),
    # issue 60: an empty path is a usage error, never the current directory (an unset CI variable)
    *(
        Case(f"{cmd[0]}-{cmd[-1].lstrip('-')}-empty", (lambda c: lambda d: [*c, ""])(cmd), {2}, in_work=True,
             stderr_has="is empty")
        for cmd in (
            ["accept", "--profile", "cpu", "--out"],
            ["bench", "--profile", "cpu", "--seq", "64", "--reps", "1", "--out"],
            ["lock", "--profile", "cpu", "--out"],
            ["lock", "--check"],
            ["compile", "--profile", "cpu", "--dry-run", "--log"],
        )
    ),
    Case("accept-out-empty-json", lambda d: ["accept", "--profile", "cpu", "--out", "", "--json"], {2},
         json_doc=True, in_work=True),
    Case("bench-seq-empty", lambda d: ["bench", "--profile", "cpu", "--seq", ""], {2}, stderr_has="--seq ''"),
    Case("bench-varlen-empty", lambda d: ["bench", "--profile", "cpu", "--varlen", ""], {2},
         stderr_has="--varlen ''"),
    Case("accept-varlen-empty", lambda d: ["accept", "-p", "cpu", "--out", str(d / "o"), "--varlen", ""], {2},
         stderr_has="--varlen ''"),
    # issue 60: an ASCII-only terminal prints every glyph as its look-alike, never an internal error
    Case("help-ascii", lambda d: ["--help"], {0}, env=ASCII_ONLY, no_output="UnicodeEncodeError"),
    Case("accept-help-ascii", lambda d: ["accept", "--help"], {0}, env=ASCII_ONLY,
         no_output="UnicodeEncodeError"),
    Case("doctor-ascii", lambda d: ["doctor", "--profile", "cpu"], {0, 10}, env=ASCII_ONLY,
         no_output="internal error"),
    Case("profiles-ascii", lambda d: ["profiles", "show", "cpu"], {0}, env=ASCII_ONLY,
         no_output="internal error"),
    # issue 60: profile values are read as written and range-checked in the schema
    *(
        Case(f"profile-{cid}", _cli("profiles", "show", _profile(old, new)), {2}, stderr_has=key)
        for cid, old, new, key in (
            ("causal-quoted", "causal: false", 'causal: "false"', "bench.causal"),
            ("cos-min-nan", "{cos_min: 0.9998,", "{cos_min: .nan,", "cos_min"),
            ("warmup-inf", "warmup: 25", "warmup: .inf", "bench.warmup"),
            ("warmup-huge", "warmup: 25", "warmup: 100000000", "10,000"),
            ("reps-huge", "reps: 100", "reps: 1000000000000", "100,000"),
            ("cos-min-5", "{cos_min: 0.9998,", "{cos_min: 5,", "(0, 1]"),
            ("rel-l1-negative", "rel_l1_max: 0.015}", "rel_l1_max: -1}", "rel_l1_max"),
            ("name-escape", "name: cpu", 'name: "\\e[2J\\e[31mcpu"', "printable"),
        )
    ),
    Case("verify-profile-nan", _cli("verify", "-p", _profile("{cos_min: 0.9998,", "{cos_min: .nan,")), {2},
         stderr_has="cos_min"),
    # issue 60: run time is bounded, and the bound is named
    Case("bench-reps-huge", _cli("bench", "-p", "cpu", "--reps", "1000000000000"), {2}, stderr_has="100,000"),
    Case("bench-warmup-huge", _cli("bench", "-p", "cpu", "--warmup", "99999999"), {2}, stderr_has="10,000"),
    Case("bench-rounds-huge", _cli("bench", "-p", "cpu", "--rounds", "99999999"), {2}, stderr_has="1,000"),
    Case("bench-sustain-inf", _cli("bench", "-p", "cpu", "--sustain", "inf"), {2}, stderr_has="finite"),
    Case("accept-reps-huge", _cli("accept", "-p", "cpu", "-o", lambda d: d.parent / "o", "--reps", "1000000"),
         {2}, stdout_has="not accepted (exit 2)"),
    # issue 60: a lockfile of the wrong shape is a usage error, never an internal error
    *(
        Case(f"lock-check-{cid}", _cli("lock", "--check", _lock(text)), {2}, stderr_has=said)
        for cid, text, said in (
            ("artefact-int", '"artefacts": [1]', "artefact #1"),
            ("artefact-build", '"artefacts": [{"build": 3}]', "artefact #1"),
            ("profile-list", '"artefacts": [], "profile": [1]', "profile"),
            ("profile-name", '"artefacts": [], "profile": {"name": 3}', "profile"),
            ("deep", "[" * 100_000, "nested"),
            ("deep-section", '"artefacts": [], "gpu": {"a": ' + "[" * 500 + "]" * 500 + "}", "nest"),
        )
    ),
    Case(
        "accept-ascii",
        lambda d: ["accept", "-p", "cpu", "--out", str(d.parent / "run"), "--verify-shape", "1,8,9999999,64"],
        {3}, env=ASCII_ONLY, no_output="internal error", stdout_has="not accepted (exit 3) -- report",
    ),
]  # fmt: skip


def _snapshot(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[str(p.relative_to(d)) + "/"] = "dir"
    return out


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_a_clear_message_and_a_documented_code(case: Case, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    if case.in_work:
        _users_files(work)
    args = case.args(work)
    before = _snapshot(work)
    env = {**os.environ, "SAGEBUILD_CACHE_DIR": str(tmp_path / "cache"), "CI": "1", **case.env}
    env.pop("TRITON_INTERPRET", None)
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "sagebuild", *args],
        capture_output=True, text=True, env=env, timeout=TIME_LIMIT_S, preexec_fn=_limits,
        stdin=subprocess.DEVNULL, cwd=work if case.in_work else tmp_path,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    both = r.stdout + r.stderr
    assert "Traceback" not in both, both[-3000:]
    assert not case.no_output or case.no_output not in both, both[-3000:]
    assert r.returncode in case.codes, (r.returncode, both[-3000:])
    assert r.returncode in DOCUMENTED
    assert elapsed < TIME_LIMIT_S
    assert _snapshot(work) == before, "a file that was there changed"
    assert case.stdout_has in r.stdout, r.stdout[-2000:]
    if r.returncode != 0 and not case.stdout_has:
        assert "error:" in r.stderr and "fix:" in r.stderr, r.stderr[-2000:]
        assert case.stderr_has.lower() in r.stderr.lower(), r.stderr[-2000:]
    if case.json_doc:
        doc = json.loads(r.stdout)
        assert doc["ok"] is False and doc["error"]["exit_code"] == r.returncode and doc["error"]["message"]


def test_every_exit_code_is_documented():
    from sagebuild.errors import Exit

    doc = (Path(__file__).resolve().parent.parent / "docs" / "ci.md").read_text()
    for code in Exit:
        assert f"| {int(code)} |" in doc, f"docs/ci.md does not list exit code {int(code)} ({code.name})"
    assert {int(c) for c in Exit} == DOCUMENTED


@pytest.mark.parametrize("json_out", [True, False])
def test_a_closed_stdout_ends_quietly(tmp_path: Path, json_out: bool):
    """``sagebuild ... --json | head``: the reader left before the document was written; that is
    no bug to report, so no 'internal error', no traceback, and the shell's SIGPIPE exit code;
    a rich table (written by rich, which would exit 1) ends the same way."""
    r_fd, w_fd = os.pipe()
    os.close(r_fd)  # every write to w_fd now fails with EPIPE
    env = {**os.environ, "SAGEBUILD_CACHE_DIR": str(tmp_path / "cache"), "CI": "1"}
    try:
        r = subprocess.run(
            [sys.executable, "-m", "sagebuild", "profiles", *(["--json"] if json_out else [])],
            stdout=w_fd, stderr=subprocess.PIPE, text=True, env=env, timeout=TIME_LIMIT_S,
        )  # fmt: skip
    finally:
        os.close(w_fd)
    assert r.returncode == 141, r.stderr
    assert r.stderr == "", r.stderr


# ---- issue 60: each of these lost or overwrote a user's file, or misled, before its fix ----------

TESTS = Path(__file__).resolve().parent
_CACHE_SEEN = (
    "import sys; sys.path.insert(0, sys.argv[1]); import conftest, os; print(os.environ[sys.argv[2]])"
)


@pytest.mark.parametrize("shared", [None, "1"])
def test_the_tests_never_use_a_cache_dir_that_is_set(tmp_path: Path, shared):
    """The README's test command with SAGEBUILD_CACHE_DIR naming a cache that holds a build (the
    quickstart's): the tests get a fresh temporary cache of their own, unless the GPU check asks
    to share (SAGEBUILD_TEST_SHARED_CACHE=1)."""
    users = tmp_path / "users-cache"
    (users / "ext").mkdir(parents=True)
    env = {**os.environ, "SAGEBUILD_CACHE_DIR": str(users)}
    env.pop("SAGEBUILD_TEST_SHARED_CACHE", None)
    if shared:
        env["SAGEBUILD_TEST_SHARED_CACHE"] = shared
    r = subprocess.run(
        [sys.executable, "-c", _CACHE_SEEN, str(TESTS), "SAGEBUILD_CACHE_DIR"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    seen = Path(r.stdout.strip().splitlines()[-1])
    if shared:
        assert seen == users
    else:
        assert seen != users and seen.is_dir() and not any(seen.iterdir())


QUICK_ACCEPT = ["accept", "-p", "cpu", "--verify-shape", "1,8,9999999,64"]  # refused: ends in seconds, exit 3


def _mounts_work() -> bool:
    """Whether a private mount namespace can be made here (``unshare -m``, as root): tests of
    mount points and read-only filesystems need one."""
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


needs_mounts = pytest.mark.skipif(not _mounts_work(), reason="needs `unshare -m` (root in a mount namespace)")


def _sagebuild(args: list[str], tmp_path: Path, mounts: dict[Path, str] = {}, **env: str):  # noqa: B006
    """Run the CLI, in a private mount namespace with a tmpfs at each of ``mounts`` (its options)."""
    full_env = {**os.environ, "SAGEBUILD_CACHE_DIR": str(tmp_path / "cache"), "CI": "1", **env}
    full_env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, "-m", "sagebuild", *args]
    if mounts:
        mount = " && ".join(
            f"mount -t tmpfs -o {opts} none {shlex.quote(str(p))}" for p, opts in mounts.items()
        )
        cmd = ["unshare", "-m", "sh", "-c", f'{mount} && exec "$@"', "sh", *cmd]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=full_env, timeout=TIME_LIMIT_S, cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".run-" in p.name or ".old." in p.name)


def test_accept_out_dangling_symlink_is_refused_before_running(tmp_path: Path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone" / "out")
    t0 = time.monotonic()
    r = _sagebuild(["accept", "-p", "cpu", "--out", str(link)], tmp_path)
    assert r.returncode == 2 and "symbolic link" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert time.monotonic() - t0 < 30  # before the pipeline, not after it
    assert link.is_symlink() and not link.exists() and _leftovers(tmp_path) == []


@needs_mounts
def test_accept_out_on_a_read_only_mount_is_refused_before_running(tmp_path: Path):
    out = tmp_path / "ci-volume"
    out.mkdir()
    t0 = time.monotonic()
    r = _sagebuild(["accept", "-p", "cpu", "--out", str(out)], tmp_path, mounts={out: "ro"})
    assert r.returncode == 2 and "read-only" in r.stderr, r.stderr[-2000:]
    assert time.monotonic() - t0 < 30
    assert _leftovers(tmp_path) == []


@needs_mounts
def test_accept_out_that_is_a_mount_point_is_written_in_place(tmp_path: Path):
    """A CI volume mounted at --out cannot be renamed: the run is written into it, beside the
    user's files, with nothing left behind."""
    out = tmp_path / "ci-volume"
    out.mkdir()
    script = (
        f"echo mine > {shlex.quote(str(out))}/notes.txt && "
        + shlex.join([sys.executable, "-m", "sagebuild", *QUICK_ACCEPT, "--out", str(out)])
        + f" ; rc=$?; ls -A {shlex.quote(str(out))}; cat {shlex.quote(str(out))}/notes.txt; exit $rc"
    )
    env = {**os.environ, "SAGEBUILD_CACHE_DIR": str(tmp_path / "cache"), "CI": "1"}
    env.pop("TRITON_INTERPRET", None)
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o rw none {shlex.quote(str(out))} && {script}"],
        capture_output=True, text=True, env=env, timeout=TIME_LIMIT_S, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr[-2000:]
    listed = r.stdout.split()
    assert {"report.json", "junit.xml", "notes.txt"} <= set(listed) and "mine" in listed, r.stdout
    assert not [n for n in listed if ".run-" in n] and _leftovers(tmp_path) == []


def test_accept_out_gets_the_umask_mode_not_0700(tmp_path: Path):
    out = tmp_path / "run"
    r = _sagebuild([*QUICK_ACCEPT, "--out", str(out)], tmp_path)
    assert r.returncode == 3, r.stderr[-2000:]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask


def test_accept_removes_a_killed_runs_folder_and_cleans_up_on_sigterm(tmp_path: Path):
    out = tmp_path / "run"
    killed = tmp_path / ".run.run-999999999-abcd1234"  # a run killed (SIGKILL) before cleaning up
    killed.mkdir()
    (killed / "report.json").write_text("{}")
    r = _sagebuild([*QUICK_ACCEPT, "--out", str(out)], tmp_path)
    assert r.returncode == 3 and not killed.exists() and _leftovers(tmp_path) == [], r.stderr[-2000:]
    before = _snapshot(out)
    env = {**os.environ, "SAGEBUILD_CACHE_DIR": str(tmp_path / "cache"), "CI": "1"}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sagebuild", "accept", "-p", "cpu", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not _leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _leftovers(tmp_path), "the run never started"
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in err, err[-2000:]
    assert _leftovers(tmp_path) == [] and _snapshot(out) == before


@needs_mounts
def test_a_read_only_home_fails_the_doctor_not_an_internal_error(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "SAGEBUILD_CACHE_DIR": "", "XDG_CACHE_HOME": ""}
    r = _sagebuild(["doctor", "-p", "cpu"], tmp_path, mounts={home: "ro"}, **env)
    assert r.returncode == 10 and "cache-dir" in r.stdout and "SAGEBUILD_CACHE_DIR" in r.stdout, r.stdout[
        -3000:
    ]
    r = _sagebuild([*QUICK_ACCEPT[:3], "--out", str(tmp_path / "run")], tmp_path, mounts={home: "ro"}, **env)
    both = r.stdout + r.stderr
    assert r.returncode == 10 and "internal error" not in both and "Traceback" not in both, both[-3000:]


@pytest.mark.parametrize("json_out", [False, True])
def test_bench_out_on_a_full_disk_still_shows_the_finished_bench(tmp_path: Path, monkeypatch, json_out: bool):
    """The bench ran; writing --out failed at the end (ENOSPC): the table (or the JSON document,
    with the error in it) is still printed, then the error, exit 2."""
    from typer.testing import CliRunner

    from sagebuild import fsio
    from sagebuild.cli.app import app

    def full(path, text):
        raise fsio.write_error(path, OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(fsio, "write_text_atomic", full)
    small = [
        "--seq",
        "64",
        "--heads",
        "2",
        "--head-dim",
        "32",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--rounds",
        "1",
    ]
    args = [
        "bench",
        "-p",
        "cpu",
        *small,
        "--out",
        str(tmp_path / "bench.json"),
        *(["--json"] if json_out else []),
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    if json_out:
        doc = json.loads(r.stdout)
        assert doc["error"]["exit_code"] == 2 and doc["rows"] and "disk is full" in doc["error"]["message"]
    else:
        assert "sagebuild bench" in r.stdout and "sdpa" in r.stdout, r.stdout
    assert "disk is full" in r.stderr and "fix:" in r.stderr
