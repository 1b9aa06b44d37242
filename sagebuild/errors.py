"""Exit codes and the user-facing error type, mapped in one place (docs/ci.md lists them).

A ``SagebuildError`` is a user mistake or an environment problem: the CLI prints its message
and fix (no traceback) and exits with its code. Anything else is an internal error (exit 1):
the CLI says so and asks for a report; ``--debug`` shows the traceback.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    INTERNAL = 1  # a sagebuild bug: report it
    USAGE = 2  # a bad option, input file or output path: the message says which and what to do
    ENVIRONMENT = 3  # the machine lacks what was asked for: no such GPU, not enough memory, a broken --python
    DOCTOR_FAILED = 10
    COMPILE_FAILED = 20
    VERIFY_FAILED = 30
    BENCH_BELOW_THRESHOLD = 40
    LOCK_DRIFT = 50
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it
    BROKEN_PIPE = 141  # stdout's reader went away (128 + SIGPIPE, as `yes | head` ends)
    TERMINATED = 143  # SIGTERM (a cancelled CI job, `timeout`), after cleaning up (128 + SIGTERM)


class Terminated(BaseException):
    """SIGTERM arrived where a command cleans up after itself (``rundir.terminate_raises``): like
    ``KeyboardInterrupt``, no ``except Exception`` stops it on its way out."""


class SagebuildError(Exception):
    """An actionable error: what was wrong (message) and what to do (fix)."""

    def __init__(self, message: str, fix: str | None = None, code: Exit = Exit.USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.code = code

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"

    def to_dict(self) -> dict[str, object]:
        """The error as ``--json`` output carries it."""
        return {"message": self.message, "fix": self.fix, "exit_code": int(self.code)}


def internal_error(exc: BaseException) -> SagebuildError:
    """An unexpected exception as a one-line error that says it is a bug and where to report it."""
    what = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return SagebuildError(
        f"internal error (a sagebuild bug): {what}",
        fix="please report it on the sagebuild issue tracker with the command line and the output of the "
        "same command with `sagebuild --debug ...` (it shows the traceback)",
        code=Exit.INTERNAL,
    )
