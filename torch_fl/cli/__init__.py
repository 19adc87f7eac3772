"""Subcommands of `python -m torch_fl` (one module each)."""
