"""Throwaway servers from the machine's binaries, shared by the tests (tests_py/) and the
benchmark (bench/): a PostgreSQL cluster (``pgserver``), a PgBouncer in front of one
(``pgbouncer``) and a fault-injecting TCP proxy (``pgproxy``). Standard library only, and no
import of ctrlrun, so ``python3 -m throwaway.pgserver -- CMD`` (CMD run with a throwaway
cluster named by ``CTRLRUN_TEST_POSTGRES_URL``) works from the repository root with any
Python 3.9+.
"""
