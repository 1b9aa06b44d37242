"""The command-line interface: one module per command, composed in ``app.py``."""
