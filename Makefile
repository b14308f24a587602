# The two commands of the README: `make demo` and `make test`. Each builds .venv on first use.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.attnkit-installed

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulled in by a dependency would fetch a multi-GB CUDA build
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/attnkit demo

# The viewer's browser test needs Debian's chromium + chromium-driver: `test` installs them when it
# can (root with apt-get; `apt-get update` only if the first try fails) and never fails for it:
# without them that test skips, and one line says why.
test: $(STAMP)
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" != 0 ]; then \
	  echo "browser test will be skipped: chromium/chromedriver missing and not root to apt-get install them"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "browser test will be skipped: chromium/chromedriver missing and no apt-get"; \
	else \
	  echo "installing chromium and chromium-driver (apt-get) for the browser test"; \
	  install="apt-get install -y -qq --no-install-recommends chromium chromium-driver"; \
	  if DEBIAN_FRONTEND=noninteractive $$install >/dev/null 2>&1 \
	    || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive $$install >/dev/null 2>&1; }; \
	  then :; else echo "browser test will be skipped: apt-get install chromium chromium-driver failed"; fi; \
	fi
	$(PY) -m pytest -n 2 -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
