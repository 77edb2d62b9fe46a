"""Fixtures of the framework integration tests: each case runs against the real framework, its
own test model (no API key), on both backends (``store_url``) and with sync and async tools."""
