"""Progress for long steps: a rich status line on an interactive terminal, silence in CI and pipes."""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterator, Optional

from sagebuild.cli.common import console


def interactive(json_out: bool = False) -> bool:
    """True on a TTY outside CI (``CI`` is set by GitHub Actions, GitLab and most other runners)."""
    return not json_out and console.is_terminal and not os.environ.get("CI")


@contextlib.contextmanager
def status(title: str, json_out: bool = False) -> Iterator[Optional[Callable[[str], None]]]:
    """Yields a ``say(message)`` callback that updates a spinner, or None when not interactive."""
    if not interactive(json_out):
        yield None
        return
    with console.status(title) as st:
        yield lambda msg: st.update(f"{title}: {msg}")
