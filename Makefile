# gpuledger: `make demo` runs the product, `make test` runs the whole suite, `make bench` measures.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FOCUS_VENV := .venv-focus
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test bench lint clean venv chromium focus-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuledger demo

# the browser tests drive Debian's Chromium (never a downloaded one)
chromium:
	test -x /usr/lib/chromium/chromium || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }

# the FOCUS export's test runs the FinOps Foundation's validator, which needs Python >= 3.12:
# it gets a venv of its own from the first 3.12+ that runs here (none: that test is skipped)
focus-venv:
	@test -x $(FOCUS_VENV)/bin/focus-validator && exit 0; \
	for py in $$(command -v python3.12 python3.13 python3.14 2>/dev/null) \
	          $$HOME/.pyenv/versions/3.1[2-9]*/bin/python; do \
	  if [ -x "$$py" ] && "$$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
	    echo "focus-venv: focus-validator 2.2.1 on $$py"; \
	    "$$py" -m venv $(FOCUS_VENV) && \
	    $(FOCUS_VENV)/bin/python -m pip install --quiet "focus-validator==2.2.1" "pyarrow<16"; \
	    exit $$?; \
	  fi; \
	done; \
	echo "focus-venv: no Python >= 3.12 here: the FOCUS validator's test will be skipped"

# three workers on two cores (many tests wait on a child process or the browser), each with an
# embedded engine of its own (one process owns a data directory, so they share none); a test
# file's module fixtures stay in one worker (loadfile)
test: $(STAMP) chromium focus-venv
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -n 3 --dist loadfile --durations=25

bench: $(STAMP)
	command -v promtool >/dev/null || { apt-get update -qq && apt-get install -y -qq prometheus; }
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy collector warehouse gpuledger dashboards

clean:
	rm -rf $(VENV) $(FOCUS_VENV) gpuledger-data .pytest_cache test-artifacts
