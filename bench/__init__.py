"""ctrlrun's benchmark (see bench/README.md). Run its entry points from the repository root as
modules, so that they import this package and ``tests_py.support`` by name:
``python -m bench.run``, ``python -m bench.throughput``, ``python -m bench.gateway``,
``python -m bench.retention``. The workers (``_*_worker.py``) run by path in their own venvs."""
