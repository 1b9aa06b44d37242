"""Where output goes, for every layer: reports and tables on stdout, diagnostics on stderr.

The ``pip list`` / ``collect_env`` convention: ``sagebuild profiles | grep rdna`` and
``sagebuild doctor > d.txt`` capture the answer, while progress, warnings and errors stay on the
terminal. With ``--json`` the JSON document is the only thing on stdout (commands then print
their human output nowhere). Build, bench and accept code imports from here, never from ``cli``.
Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, Iterator, Optional

from rich.console import Console

# a pipe or a CI log has no width: rich would assume 80 columns and squeeze tables
_PIPE_WIDTH = 160


def _console(stderr: bool) -> Console:
    con = Console(stderr=stderr)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con.width = _PIPE_WIDTH
    return con


out = _console(stderr=False)  # reports, tables, answers
err = _console(stderr=True)  # progress, warnings, errors


def interactive(json_out: bool = False) -> bool:
    """True on a TTY outside CI (``CI`` is set by GitHub Actions, GitLab and most other runners):
    spinners and live status lines are only drawn there."""
    return not json_out and err.is_terminal and not os.environ.get("CI")


def line(message: str) -> None:
    """One plain progress line on stderr, flushed at once (CI kills jobs silent for 10 minutes)."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()


@contextlib.contextmanager
def status(title: str, json_out: bool = False) -> Iterator[Optional[Callable[[str], None]]]:
    """Yields ``say(message)``: a spinner on a terminal, None elsewhere (use :func:`steps` for CI)."""
    if not interactive(json_out):
        yield None
        return
    with err.status(title) as st:
        yield lambda msg: st.update(f"{title}: {msg}")


@contextlib.contextmanager
def steps(title: str, json_out: bool = False) -> Iterator[Callable[[str], None]]:
    """Yields ``say(message)`` that always reports progress: a spinner on a terminal, and in a pipe
    or CI one line per message with the elapsed time (``--json`` keeps stdout clean: lines go to
    stderr)."""
    if interactive(json_out):
        with err.status(title) as st:
            yield lambda msg: st.update(f"{title}: {msg}")
        return
    t0 = time.monotonic()
    yield lambda msg: line(f"[{time.monotonic() - t0:7.1f}s] {title}: {msg}")
