"""Moved to :mod:`sagebuild.fsio` (a neutral home every layer may import); kept for old imports."""

from sagebuild.fsio import copy_atomic, write_bytes_atomic, write_text_atomic

__all__ = ["copy_atomic", "write_bytes_atomic", "write_text_atomic"]
