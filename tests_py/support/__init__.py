"""Helpers the tests (and the benchmark in bench/) import: throwaway PostgreSQL clusters and
PgBouncers, a fault-injecting TCP proxy, OS-process races, a real MCP upstream and gateway rig.

Some modules here are also scripts run in their own process, by path:
``python3 tests_py/support/pgserver.py -- CMD`` (CMD with a throwaway cluster),
``tests_py/support/mcp_upstream.py`` (an MCP server) and ``tests_py/support/_race_worker.py``.
Those import nothing from this package, so they run without it on ``sys.path``.
"""
