# Two entry points the README promises: `make demo` and `make test`.
# Each builds .venv on first use; torch is pinned so pip never pulls a CUDA build.
PY := .venv/bin/python
STAMP := .venv/.installed

$(STAMP): pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,zoo,interop,backends]'
	touch $(STAMP)

.PHONY: install demo test test-all bench
install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

test-all: $(STAMP)
	GRAPHPORT_SLOW=1 $(PY) -m pytest -q -n 2 tests

bench: $(STAMP)
	$(PY) bench/export_speed.py
	$(PY) bench/run_zoo.py
