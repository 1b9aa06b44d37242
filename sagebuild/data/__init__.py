"""Data files: the failure-signature database and JSON schemas."""
