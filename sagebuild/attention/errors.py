"""The attention API's user-facing error (torch-free, so planning and reports need no torch)."""

from __future__ import annotations

from sagebuild.errors import SagebuildError


class AttentionInputError(SagebuildError, ValueError):
    """The inputs of an attention call cannot be served as given."""
