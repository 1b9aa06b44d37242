"""Exit codes and the user-facing error type, mapped in one place.

A ``SagebuildError`` is a user mistake or an environment problem: the CLI prints its message
and fix (no traceback) and exits with its code. Anything else is an internal error (exit 1).
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    INTERNAL = 1
    USAGE = 2
    DOCTOR_FAILED = 10
    COMPILE_FAILED = 20
    VERIFY_FAILED = 30
    BENCH_BELOW_THRESHOLD = 40
    LOCK_DRIFT = 50


class SagebuildError(Exception):
    """An actionable error: what was wrong (message) and what to do (fix)."""

    def __init__(self, message: str, fix: str | None = None, code: Exit = Exit.USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.code = code

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"
