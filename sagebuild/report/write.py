"""Write one run's output directory atomically: report.json/.md/.html, junit.xml, the build log,
the environment backup."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from sagebuild.fsio import copy_atomic, write_text_atomic
from sagebuild.report.junit import to_junit
from sagebuild.report.render import to_html, to_markdown
from sagebuild.report.schema import validate

BACKUP_NAME = "environment-backup.txt"
BUILD_LOG = "build.log"
REPORT_FILES = {"json": "report.json", "markdown": "report.md", "html": "report.html", "junit": "junit.xml"}


def environment_backup(out_dir: Path, python: str | None = None, timeout: float = 120.0) -> Path:
    """``pip freeze`` of the target interpreter before anything changes (without pip, as in uv
    venvs, its installed distributions)."""
    python = python or sys.executable
    header = f"# pip freeze of {python}, taken by sagebuild before building or changing anything\n"
    try:
        proc = subprocess.run(
            [python, "-m", "pip", "freeze"], capture_output=True, text=True, timeout=timeout
        )
        ok, body = proc.returncode == 0, proc.stdout  # body: replaced below when pip fails
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    except (OSError, subprocess.TimeoutExpired) as e:
        ok, body, why = False, "", str(e)
    if not ok:
        from sagebuild.dists import installed_distributions

        header += f"# pip freeze failed ({why or 'no pip'}); listing installed distributions instead\n"
        body = "".join(f"{n}=={e['version']}\n" for n, e in installed_distributions(python).items())
    return write_text_atomic(Path(out_dir) / BACKUP_NAME, header + body)


def write_report(report: dict[str, Any], out_dir: Path, build_log: Path | None = None) -> dict[str, Path]:
    """Validate (CI must never get a malformed report) and write the report files into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if build_log is not None and Path(build_log).is_file():
        dest = out_dir / BUILD_LOG
        if Path(build_log).resolve() != dest.resolve():
            copy_atomic(build_log, dest)
        paths["build_log"] = dest
    report = json.loads(json.dumps(report, default=str))  # Paths etc. become the strings JSON will hold
    errors = validate(report)
    if errors:
        raise ValueError(
            "internal error: the report does not match its schema:\n  " + "\n  ".join(errors[:20])
        )
    paths["json"] = write_text_atomic(out_dir / REPORT_FILES["json"], json.dumps(report, indent=2) + "\n")
    paths["markdown"] = write_text_atomic(out_dir / REPORT_FILES["markdown"], to_markdown(report))
    paths["html"] = write_text_atomic(out_dir / REPORT_FILES["html"], to_html(report))
    paths["junit"] = write_text_atomic(out_dir / REPORT_FILES["junit"], to_junit(report))
    return paths
