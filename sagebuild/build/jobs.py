"""The ``MAX_JOBS`` rules (a valid value; when a value overfills memory), in one place so that
``doctor``'s ``max-jobs`` check and ``compile``'s plan say the same thing about the same value."""

from __future__ import annotations

import math
from typing import Optional

from sagebuild.errors import SagebuildError


def parse_max_jobs(raw: str) -> int:
    """The job count ``raw`` names; a usage error when it is not a positive integer."""
    text = raw.strip()
    if not text.isdigit() or int(text) < 1:
        raise SagebuildError(
            f"MAX_JOBS={raw!r} is not a positive integer",
            fix="export MAX_JOBS=2 (or unset MAX_JOBS: sagebuild compile picks it from free memory)",
        )
    return int(text)


def jobs_that_fit(avail_gb: float, per_job_gb: float) -> int:
    """How many compile jobs of ``per_job_gb`` fit in ``avail_gb`` (at least one)."""
    return max(1, math.floor(avail_gb / per_job_gb))


def overfill(jobs: int, avail_gb: Optional[float], per_job_gb: float, what: str) -> Optional[tuple[str, str]]:
    """(problem, fix) when ``jobs`` compile jobs need more memory than is free; None when they fit.
    ``what`` names where the count came from (``MAX_JOBS=16``, ``--jobs 16``)."""
    if avail_gb is None or jobs * per_job_gb <= avail_gb:
        return None
    problem = (
        f"{what} × ~{per_job_gb:g} GB per job > {avail_gb:.1f} GB free: "
        "the machine can freeze while compiling"
    )
    fit = jobs_that_fit(avail_gb, per_job_gb)
    return problem, (f"pass --jobs {fit}" if what.startswith("--jobs") else f"export MAX_JOBS={fit}")
