"""Helpers the tests import: OS-process races, a real MCP upstream and gateway rig, a
streaming standby, certificates, stores and CLI runners. The throwaway servers the benchmark
uses too (a PostgreSQL cluster, a PgBouncer, a fault-injecting proxy) are in the top-level
package ``throwaway``.

Some modules here are also scripts run in their own process, by path:
``tests_py/support/mcp_upstream.py`` (an MCP server; bench/gateway.py runs it too) and
``tests_py/support/_race_worker.py``.
Those import nothing from this package, so they run without it on ``sys.path``.
"""
