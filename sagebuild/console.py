"""Where output goes, for every layer: reports and tables on stdout, diagnostics on stderr.

So ``sagebuild doctor > d.txt`` captures the answer while progress and errors stay on the terminal.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
import time
from typing import Callable, Iterator, Optional, TextIO

from rich.console import Console

from sagebuild.errors import Exit

# What an ASCII-only terminal (``LC_ALL=C``, ``PYTHONUTF8=0``) shows for the glyphs our messages use;
# anything else becomes "?". Files (reports, locks) are always written as UTF-8 and keep them.
_ASCII = {
    "\u2014": "--", "\u2013": "-", "\u2192": "->", "\u2190": "<-", "\u00d7": "x", "\u2265": ">=",
    "\u2264": "<=", "\u00b7": ".", "\u2026": "...", "\u00b2": "^2", "\u00b3": "^3", "\u1d40": "^T",
    "\u00b5": "u", "\u2248": "~", "\u2713": "ok", "\u2717": "x", "\u2018": "'", "\u2019": "'",
    "\u201c": '"', "\u201d": '"', "\u2212": "-", "\u00b1": "+-", "\u2260": "!=", "\u221e": "inf",
}  # fmt: skip
_ASCII_ERRORS = "sagebuild-ascii"


def _to_ascii(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(_ASCII.get(c, "?") for c in exc.object[exc.start : exc.end]), exc.end


codecs.register_error(_ASCII_ERRORS, _to_ascii)


def encodable_streams() -> None:
    """Let stdout and stderr print any text, whatever their encoding: a character the terminal's
    encoding lacks (an ASCII-only locale) is written as its ASCII look-alike instead of raising
    ``UnicodeEncodeError`` in the middle of a table or a ``--help`` page."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        reconfigure = getattr(stream, "reconfigure", None)
        if encoding and reconfigure and codecs.lookup(encoding).name not in ("utf-8", "utf-16", "utf-32"):
            reconfigure(errors=_ASCII_ERRORS)


# a pipe or a CI log has no width: rich would assume 80 columns and squeeze tables
_PIPE_WIDTH = 160


def silence(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null: its reader went away (a closed pipe), and the
    interpreter's last flush must not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class _Console(Console):
    """rich's console, ending on a closed pipe with the CLI's exit code for it (``Exit.BROKEN_PIPE``,
    128 + SIGPIPE, as ``--json`` output does) instead of rich's exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence(sys.stderr if self.stderr else sys.stdout)
        raise SystemExit(int(Exit.BROKEN_PIPE))


def _console(stderr: bool) -> Console:
    con = _Console(stderr=stderr)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con.width = _PIPE_WIDTH
    return con


out = _console(stderr=False)  # reports, tables, answers
err = _console(stderr=True)  # progress, warnings, errors


def interactive(json_out: bool = False) -> bool:
    """True on a TTY outside CI (``CI`` is set by most runners): only there are spinners drawn."""
    return not json_out and err.is_terminal and not os.environ.get("CI")


@contextlib.contextmanager
def status(title: str, json_out: bool = False) -> Iterator[Optional[Callable[[str], None]]]:
    """Yields ``say(message)``: a spinner on a terminal, None elsewhere (use :func:`steps` for CI)."""
    if not interactive(json_out):
        yield None
        return
    with steps(title) as say:
        yield say


@contextlib.contextmanager
def steps(title: str, json_out: bool = False) -> Iterator[Callable[[str], None]]:
    """Yields ``say(message)``: a spinner on a terminal, else a flushed stderr line per message with
    the elapsed time (CI kills jobs silent for 10 minutes)."""
    if interactive(json_out):
        with err.status(title) as st:
            yield lambda msg: st.update(f"{title}: {msg}")
        return
    t0 = time.monotonic()

    def say(msg: str) -> None:
        sys.stderr.write(f"[{time.monotonic() - t0:7.1f}s] {title}: {msg}".rstrip("\n") + "\n")
        sys.stderr.flush()

    yield say
