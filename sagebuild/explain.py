"""Match a build or run log against the known-failure database and say cause and fix.

The signatures live in one data file, ``sagebuild/data/failures.yaml``; this module only loads,
validates and searches them. ``compile``, ``verify`` and ``accept`` call :func:`explain` on their
own failure output, and ``docs/troubleshooting.md`` is rendered from the same entries by
:func:`troubleshooting_markdown`, so the CLI, the reports and the docs never disagree.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sagebuild.errors import Exit, SagebuildError

_FLAGS = re.IGNORECASE | re.MULTILINE
_REQUIRED_KEYS = ("id", "title", "patterns", "cause", "fix", "source")
_ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Failure:
    """One known failure: how to recognise it and what to do about it."""

    id: str
    title: str
    patterns: tuple[re.Pattern[str], ...]
    requires: tuple[re.Pattern[str], ...]
    excludes: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    source: str

    def first_hit(self, text: str) -> re.Match[str] | None:
        """The earliest pattern match in ``text`` when the entry applies, else None."""
        if any(not r.search(text) for r in self.requires):
            return None
        if any(x.search(text) for x in self.excludes):
            return None
        hits = [m for m in (p.search(text) for p in self.patterns) if m is not None]
        return min(hits, key=lambda m: m.start()) if hits else None


@dataclass(frozen=True)
class Match:
    """A failure found in a log, with the line that gave it away."""

    id: str
    title: str
    cause: str
    fix: str
    matched_line: str
    line_number: int  # 1-based line of the match in the log
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _compile(entry_id: str, field: str, raw: Any) -> tuple[re.Pattern[str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise SagebuildError(
            f"failure database: entry {entry_id!r}: {field!r} must be a list of non-empty strings",
            fix="edit sagebuild/data/failures.yaml",
            code=Exit.INTERNAL,
        )
    out = []
    for pattern in raw:
        try:
            out.append(re.compile(pattern, _FLAGS))
        except re.error as err:
            raise SagebuildError(
                f"failure database: entry {entry_id!r}: bad regex {pattern!r}: {err}",
                fix="edit sagebuild/data/failures.yaml",
                code=Exit.INTERNAL,
            ) from None
    return tuple(out)


def parse_database(doc: Any) -> tuple[Failure, ...]:
    """Validate a loaded YAML document and turn it into :class:`Failure` rows (errors name the entry)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("failures"), list):
        raise SagebuildError(
            "failure database: expected a mapping with a 'failures' list",
            fix="edit sagebuild/data/failures.yaml",
            code=Exit.INTERNAL,
        )
    seen: set[str] = set()
    rows = []
    for i, entry in enumerate(doc["failures"]):
        if not isinstance(entry, dict):
            raise SagebuildError(f"failure database: entry #{i} is not a mapping", code=Exit.INTERNAL)
        missing = [k for k in _REQUIRED_KEYS if not entry.get(k)]
        entry_id = str(entry.get("id", f"#{i}"))
        if missing:
            raise SagebuildError(
                f"failure database: entry {entry_id!r} lacks {', '.join(missing)}",
                fix="edit sagebuild/data/failures.yaml",
                code=Exit.INTERNAL,
            )
        unknown = set(entry) - {*_REQUIRED_KEYS, "requires", "excludes"}
        if unknown:
            raise SagebuildError(
                f"failure database: entry {entry_id!r} has unknown keys {sorted(unknown)}",
                code=Exit.INTERNAL,
            )
        if not _ID_RE.match(entry_id) or entry_id in seen:
            raise SagebuildError(
                f"failure database: id {entry_id!r} is not unique kebab-case", code=Exit.INTERNAL
            )
        seen.add(entry_id)
        patterns = _compile(entry_id, "patterns", entry["patterns"])
        rows.append(
            Failure(
                id=entry_id,
                title=str(entry["title"]).strip(),
                patterns=patterns,
                requires=_compile(entry_id, "requires", entry.get("requires")),
                excludes=_compile(entry_id, "excludes", entry.get("excludes")),
                cause=" ".join(str(entry["cause"]).split()),
                fix=" ".join(str(entry["fix"]).split()),
                source=str(entry["source"]).strip(),
            )
        )
    return tuple(rows)


@functools.lru_cache(maxsize=1)
def load_database() -> tuple[Failure, ...]:
    """The bundled failure database, parsed and validated once per process."""
    import yaml

    text = resources.files("sagebuild.data").joinpath("failures.yaml").read_text(encoding="utf-8")
    return parse_database(yaml.safe_load(text))


def explain(text: str) -> list[Match]:
    """Every known failure found in ``text``, in the order they first appear in the log."""
    found: list[tuple[int, Match]] = []
    for failure in load_database():
        hit = failure.first_hit(text)
        if hit is None:
            continue
        line_start = text.rfind("\n", 0, hit.start()) + 1
        line_end = text.find("\n", hit.start())
        line = text[line_start : len(text) if line_end < 0 else line_end]
        found.append(
            (
                hit.start(),
                Match(
                    id=failure.id,
                    title=failure.title,
                    cause=failure.cause,
                    fix=failure.fix,
                    matched_line=line.strip()[:500],
                    line_number=text.count("\n", 0, hit.start()) + 1,
                    source=failure.source,
                ),
            )
        )
    found.sort(key=lambda pair: pair[0])
    return [m for _, m in found]


def explain_file(path: Path) -> list[Match]:
    """:func:`explain` on a log file (bytes that are not UTF-8 are replaced, never fatal)."""
    hint = "pass an existing log file, or '-' to read stdin"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise SagebuildError(f"log file not found: {path}", fix=hint) from None
    except IsADirectoryError:
        raise SagebuildError(f"{path} is a directory, not a log file", fix=hint) from None
    except PermissionError:
        raise SagebuildError(f"cannot read {path}: permission denied", fix="check its permissions") from None
    return explain(text)


def troubleshooting_markdown() -> str:
    """``docs/troubleshooting.md``, rendered from the database (see scripts/gen_troubleshooting.py)."""
    lines = [
        "# Troubleshooting",
        "",
        "<!-- Generated by scripts/gen_troubleshooting.py from sagebuild/data/failures.yaml;"
        " do not edit. -->",
        "",
        "Paste a failing build or run log into `sagebuild explain` and it names the failure and the fix:",
        "",
        "```bash",
        "sagebuild explain build.log          # or: some-command 2>&1 | sagebuild explain -",
        "sagebuild explain build.log --json   # machine-readable",
        "```",
        "",
        "`sagebuild compile`, `verify` and `accept` run the same matcher on their own failures. "
        "The known failures:",
        "",
    ]
    rows = load_database()
    lines += [f"- [{f.title}](#{f.id})" for f in rows]
    for f in rows:
        lines += [
            "",
            f'<a id="{f.id}"></a>',
            f"## {f.title}",
            "",
            f"`{f.id}` · recognised by: " + ", ".join(f"`` {p.pattern} ``" for p in f.patterns),
            "",
            f"**Cause.** {f.cause}",
            "",
            f"**Fix.** {f.fix}",
            "",
            f"*Source: {f.source}.*",
        ]
    return "\n".join(lines) + "\n"


def explain_for_report(text: str) -> list[dict[str, Any]]:
    """``explain`` as plain dicts for compile/verify/accept reports; never raises, so that an
    explanation can never hide the failure it explains."""
    try:
        return [m.to_dict() for m in explain(text)]
    except Exception as e:  # noqa: BLE001 - a broken database must not mask the real failure
        return [{"id": "explain-error", "title": f"explaining the log failed: {e}"}]
