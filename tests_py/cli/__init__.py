"""The ctrlrun command, verify, the docs' and examples' code, the pytest plugin."""
