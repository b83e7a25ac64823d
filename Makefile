# gpuledger: `make demo` runs the product, `make test` runs the whole suite, `make bench` measures.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test bench lint clean venv chromium

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

test: $(STAMP) chromium
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

bench: $(STAMP)
	command -v promtool >/dev/null || { apt-get update -qq && apt-get install -y -qq prometheus; }
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy collector warehouse gpuledger dashboards

clean:
	rm -rf $(VENV) gpuledger-data .pytest_cache test-artifacts
