"""ctrlrun's benchmark (see bench/README.md). Run its entry points from the repository root as
modules, so that they import this package and ``throwaway`` by name: ``python -m bench.run``,
``bench.throughput``, ``bench.gateway``, ``bench.retention``, ``bench.frames``, ``bench.compare``.
The workers (``_*_worker.py``) run by path in their own venvs."""
