#!/usr/bin/env python3
"""Maintainers: merge users' exported tuning records into the shipped data, as a new table version.

    python scripts/merge_tuning_records.py EXPORT.json [EXPORT.json ...] --cite "issue 123"
        [--data sagebuild/data] [--configs kernels/triton/configs.py] [--version 2026.12.07.1]

Each export is what ``sagebuild tune --export FILE`` wrote on a user's GPU (an RX 9070 XT, an RTX
4090, ...). Its classes go into ``sagebuild/data/tuned-<family>.json`` (``tuning.defaults`` ships
them for every GPU of the family that has no tuning record of its own), each class citing where
it came from: ``--cite`` (the issue), the GPU, its runtime and versions, the date tuned and the
export's sha256. A class of the same shape already there is replaced (a later export on the command
line replaces an earlier one). The config table's version (``CONFIG_TABLE_VERSION``) is bumped,
so records tuned under the old data are re-tuned, and the new version is printed. Exit 2 on a file
that is not an export.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import re
import sys
from pathlib import Path

from sagebuild import archs
from sagebuild.fsio import write_text_atomic
from sagebuild.tuning import record
from sagebuild.tuning.defaults import _SHIPPED

ROOT = Path(__file__).resolve().parents[1]
_VERSION = re.compile(r'^CONFIG_TABLE_VERSION = "([^"]+)"$', re.M)


def citation(rec: record.TuningRecord, cite: str, sha: str) -> str:
    """Where a merged class came from, as its ``source``."""
    fp = rec.fingerprint
    return (
        f"{cite}: sagebuild tune --export on {fp.gpu} ({fp.arch}), {fp.runtime}, driver {fp.driver or '?'}, "
        f"torch {fp.torch}, Triton {fp.triton}, sagebuild {fp.sagebuild}, table {fp.table}, tuned "
        f"{rec.created or '?'}, export sha256 {sha[:16]}"
    )


def next_version(current: str, today: datetime.date) -> str:
    """``YYYY.MM.DD.N``: the next N of today's date, else today's first."""
    stem = today.strftime("%Y.%m.%d")
    if current.startswith(stem + "."):
        return f"{stem}.{int(current.rsplit('.', 1)[1]) + 1}"
    return f"{stem}.1"


def merge(exports: list[Path], cite: str, data: Path) -> dict[str, record.TuningRecord]:
    """The family files after merging ``exports`` into those in ``data`` (not yet written)."""
    from sagebuild.tuning.defaults import contributed

    families = contributed(data)
    for path in exports:
        rec = record.read(path)  # TuningRecordError: not an export
        row = archs.ARCHS.get(rec.fingerprint.arch)
        if row is None:
            raise record.TuningRecordError(
                f"{path}: arch {rec.fingerprint.arch!r} is not a GPU the arch table knows",
                "merge exports made on a supported GPU",
            )
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        target = families.setdefault(row.family, record.TuningRecord(_SHIPPED, [], created="shipped"))
        for c in rec.classes:
            target.put(
                record.TunedClass(
                    c.shape, c.winner, c.sdpa_ms, c.runner_up, c.failed, citation(rec, cite, sha)
                )
            )
        print(f"{path}: {len(rec.classes)} classes into {row.family} ({rec.fingerprint.gpu})")
    return families


def bump(configs_py: Path, version: str | None) -> str:
    """Set the config table's version (the next one of today by default); returns it."""
    text = configs_py.read_text(encoding="utf-8")
    found = _VERSION.search(text)
    if not found:
        raise SystemExit(f"{configs_py}: no CONFIG_TABLE_VERSION line")
    new = version or next_version(found.group(1), datetime.date.today())
    write_text_atomic(configs_py, _VERSION.sub(f'CONFIG_TABLE_VERSION = "{new}"', text, count=1))
    return new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exports", nargs="+", type=Path, help="files written by `sagebuild tune --export`")
    ap.add_argument("--cite", required=True, help='where the exports came from, e.g. "issue 123"')
    ap.add_argument("--data", type=Path, default=ROOT / "sagebuild" / "data", help="the shipped data folder")
    ap.add_argument("--configs", type=Path, default=ROOT / "kernels" / "triton" / "configs.py")
    ap.add_argument("--version", help="the new table version (default: the next of today's)")
    args = ap.parse_args(argv)
    try:
        families = merge(args.exports, args.cite, args.data)
    except record.TuningRecordError as exc:
        print(f"error: {exc.message}\nfix: {exc.fix}", file=sys.stderr)
        return 2
    for family, rec in families.items():
        out = args.data / f"tuned-{family}.json"
        write_text_atomic(out, json.dumps(rec.to_dict(), indent=1) + "\n")
        print(f"wrote {out} ({len(rec.classes)} classes)")
    version = bump(args.configs, args.version)
    print(f"config table version {version}: note it in docs/performance.md with the contributors' numbers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
