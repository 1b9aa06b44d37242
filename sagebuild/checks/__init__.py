"""The doctor's checks: each reads ``Facts`` and a ``Profile`` and returns a verdict with a fix.

Adding one is a decorated function in its topic's module (docs/doctor.md, "Adding a check").
"""

from __future__ import annotations

# Importing a topic module registers its checks; this order is the order of the doctor's table.
# isort: off
from sagebuild.checks import interpreter, torch_stack, devices  # noqa: F401
from sagebuild.checks import triton_stack, toolchain, environment, tuning  # noqa: F401

# isort: on
from sagebuild.checks.registry import (  # noqa: F401 - the package's API
    REGISTRY,
    Check,
    Verdict,
    check,
    counts,
    fail,
    ok,
    overall,
    run_checks,
    skip,
    verdict,
    warn,
)
