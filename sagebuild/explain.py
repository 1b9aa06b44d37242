"""Match a build or run log against the known-failure database and say cause and fix.

``sagebuild/data/failures.yaml`` feeds the CLI, the steps' reports and docs/troubleshooting.md alike.
"""

from __future__ import annotations

import functools
import io
import re
import stat
from collections import deque
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO, Optional

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


def _bad_database(what: str) -> SagebuildError:
    return SagebuildError(
        f"failure database: {what}", fix="edit sagebuild/data/failures.yaml", code=Exit.INTERNAL
    )


def _compile(entry_id: str, field: str, raw: Any) -> tuple[re.Pattern[str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise _bad_database(f"entry {entry_id!r}: {field!r} must be a list of non-empty strings")
    try:
        return tuple(re.compile(pattern, _FLAGS) for pattern in raw)
    except re.error as err:
        raise _bad_database(f"entry {entry_id!r}: bad regex {err.pattern!r}: {err}") from None


def parse_database(doc: Any) -> tuple[Failure, ...]:
    """Validate a loaded YAML document and turn it into :class:`Failure` rows (errors name the entry)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("failures"), list):
        raise _bad_database("expected a mapping with a 'failures' list")
    rows: list[Failure] = []
    for i, entry in enumerate(doc["failures"]):
        if not isinstance(entry, dict):
            raise _bad_database(f"entry #{i} is not a mapping")
        missing = [k for k in _REQUIRED_KEYS if not entry.get(k)]
        entry_id = str(entry.get("id", f"#{i}"))
        if missing:
            raise _bad_database(f"entry {entry_id!r} lacks {', '.join(missing)}")
        unknown = set(entry) - {*_REQUIRED_KEYS, "requires", "excludes"}
        if unknown:
            raise _bad_database(f"entry {entry_id!r} has unknown keys {sorted(unknown)}")
        if not _ID_RE.match(entry_id) or entry_id in {r.id for r in rows}:
            raise _bad_database(f"id {entry_id!r} is not unique kebab-case")
        rows.append(
            Failure(
                id=entry_id,
                title=str(entry["title"]).strip(),
                patterns=_compile(entry_id, "patterns", entry["patterns"]),
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


# A log is streamed, never read whole, so matching is linear in at most TAIL_BYTES.
TAIL_BYTES = 2 * 1024 * 1024  # the failure is at the end of a build log
MAX_LINE = 4096  # a minified blob or /dev/zero is one endless "line"
MAX_READ = 256 * 1024 * 1024  # a stream that never ends (a FIFO, /dev/zero)
_CHUNK = 1024 * 1024
_CUT_MARK = b" [...] "  # where the middle of an over-long line was left out


@dataclass(frozen=True)
class LogText:
    """The part of a log that is searched, and what was left out (``note`` is None when nothing was)."""

    text: str
    bytes_read: int
    truncated: bool
    note: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {"bytes_read": self.bytes_read, "truncated": self.truncated, "note": self.note}


def _mib(n: float) -> str:
    return f"{n / 1024**2:.0f} MiB" if n >= 1024**2 else f"{n / 1024:.0f} KiB"


def read_log(
    stream: BinaryIO,
    size: Optional[int] = None,
    tail_bytes: int = TAIL_BYTES,
    max_line: int = MAX_LINE,
    max_read: int = MAX_READ,
) -> LogText:
    """Stream ``stream`` keeping its last ``tail_bytes`` as lines of at most ``max_line`` characters
    (a longer line keeps its first and last half: the error at the end of a long compiler command
    line is found); with ``size`` (a regular file's) reading starts ``tail_bytes`` before its end."""
    skipped = max(0, size - tail_bytes) if size is not None else 0
    if skipped:
        stream.seek(skipped)
    kept: deque[bytes] = deque()
    kept_bytes = 0
    cut_lines = 0
    line = bytearray()  # the current line (at most max_line bytes of its head)
    half = (max_line - len(_CUT_MARK)) // 2  # a cut line keeps this much of each end: max_line in all
    end = bytearray()  # the last ``half`` bytes of the current line
    line_len = 0
    total = 0

    def end_line() -> None:
        nonlocal kept_bytes, cut_lines, line_len
        cut = line_len > max_line
        cut_lines += cut
        text = bytes(line[:half]) + _CUT_MARK + bytes(end) if cut else bytes(line)
        kept.append(text)
        kept_bytes += len(text) + 1
        while kept_bytes > tail_bytes and kept:
            kept_bytes -= len(kept.popleft()) + 1
        line.clear()
        end.clear()
        line_len = 0

    while total < max_read:
        chunk = stream.read(min(_CHUNK, max_read - total))
        if not chunk:
            break
        total += len(chunk)
        parts = chunk.split(b"\n")
        for i, part in enumerate(parts):
            line += part[: max_line - len(line)]  # never negative: line stops at max_line
            end += part[-half:]
            del end[:-half]
            line_len += len(part)
            if i < len(parts) - 1:  # a line ends here
                end_line()
    if line_len:  # the last line had no newline
        end_line()
    stopped = total >= max_read  # the cap was reached (an endless stream, or one exactly that long)
    notes = []
    if skipped or total > kept_bytes:  # the head of the file, or of what was read, was left out
        notes.append(
            f"searched the last {_mib(min(kept_bytes, tail_bytes))} of "
            f"{_mib(skipped + total)}{' read' if stopped else ''}"
        )
    if stopped:
        notes.append(f"stopped reading after {_mib(max_read)} (an endless stream?)")
    if cut_lines:
        notes.append(
            f"{cut_lines} line(s) longer than {max_line} bytes were cut in the middle (their first and "
            f"last {half} bytes were searched)"
        )
    text = b"\n".join(kept).decode("utf-8", errors="replace")
    return LogText(text, skipped + total, bool(notes), "; ".join(notes) or None)


def explain(text: str) -> list[Match]:
    """Every known failure found in ``text``, in the order they first appear in the log."""
    if len(text) > TAIL_BYTES or any(len(ln) > MAX_LINE for ln in text.split("\n")):
        # text already in memory (a step's error, a compiler's key lines) gets a log file's bounds
        text = read_log(io.BytesIO(text.encode("utf-8", errors="replace"))).text
    found: list[tuple[int, Match]] = []
    for f in load_database():
        if any(not r.search(text) for r in f.requires) or any(x.search(text) for x in f.excludes):
            continue
        starts = [m.start() for m in (p.search(text) for p in f.patterns) if m is not None]
        if not starts:
            continue
        start = min(starts)
        end = text.find("\n", start)  # the matched line, sliced in place (a log can be megabytes)
        line = text[text.rfind("\n", 0, start) + 1 : end if end >= 0 else None]
        number = text.count("\n", 0, start) + 1
        found.append((start, Match(f.id, f.title, f.cause, f.fix, line.strip()[:500], number, f.source)))
    return [m for _, m in sorted(found, key=lambda pair: pair[0])]


def read_log_file(path: Path) -> LogText:
    """:func:`read_log` on a path (a device is streamed under the read cap); exit 2 if unreadable. A
    named pipe or socket is refused: opening one with no writer would wait forever."""
    hint = "pass an existing log file, or '-' to read stdin"
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise SagebuildError(f"{path} is a directory, not a log file", fix=hint)
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            what = "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a socket"
            raise SagebuildError(
                f"{path} is {what}: reading it would wait for a writer that may never come",
                fix="pipe the log in instead: some-command 2>&1 | sagebuild explain -",
            )
        with open(path, "rb") as fh:
            return read_log(fh, st.st_size if stat.S_ISREG(st.st_mode) else None)
    except FileNotFoundError:
        raise SagebuildError(f"log file not found: {path}", fix=hint) from None
    except PermissionError:
        raise SagebuildError(f"cannot read {path}: permission denied", fix="check its permissions") from None
    except OSError as e:
        raise SagebuildError(f"cannot read {path}: {e.strerror or e}", fix=hint) from None


def troubleshooting_markdown() -> str:
    """``docs/troubleshooting.md``, rendered from the database (see scripts/gen_troubleshooting.py)."""
    head = """# Troubleshooting

<!-- Generated by scripts/gen_troubleshooting.py from sagebuild/data/failures.yaml; do not edit. -->

Paste a failing build or run log into `sagebuild explain` and it names the failure and the fix:

```bash
sagebuild explain build.log          # or: some-command 2>&1 | sagebuild explain -
sagebuild explain build.log --json   # machine-readable
```

`sagebuild compile`, `verify` and `accept` run the same matcher on their own failures. The known failures:
"""
    rows = load_database()
    lines = [head] + [f"- [{f.title}](#{f.id})" for f in rows]
    for f in rows:
        patterns = ", ".join(f"`` {p.pattern} ``" for p in f.patterns)
        lines.append(f"""
<a id="{f.id}"></a>
## {f.title}

`{f.id}` · recognised by: {patterns}

**Cause.** {f.cause}

**Fix.** {f.fix}

*Source: {f.source}.*""")
    return "\n".join(lines) + "\n"


def fix_entry(id_: str, title: str, cause: str, fix: str, line: Optional[str] = None) -> dict[str, Any]:
    """A report explanation that a step wrote itself (no log line matched)."""
    return {"id": id_, "title": title, "cause": cause, "fix": fix, "matched_line": line}


def explain_for_report(text: str) -> list[dict[str, Any]]:
    """``explain`` as plain dicts for the reports; never raises, so it cannot hide the failure it explains."""
    try:
        return [m.to_dict() for m in explain(text)]
    except Exception as e:  # noqa: BLE001 - a broken database must not mask the real failure
        return [{"id": "explain-error", "title": f"explaining the log failed: {e}"}]
