"""The ``ctrlrun`` command (``main``): the group in ``main.py``, one module per command group,
shared options and helpers in ``_common.py``."""

from ctrlrun.cli.main import cli, main

__all__ = ["cli", "main"]
