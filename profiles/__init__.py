"""Bundled YAML profiles, one per hardware/software family."""
