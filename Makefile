# The two commands of the README: `make demo` and `make test`. Each builds .venv on first use.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.attnkit-installed

.PHONY: demo test lint install clean docs

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

# Debian packages some tests use: chromium + chromium-driver (the viewer's browser test) and
# dataset-fashion-mnist (the Vision Transformer's data, survey Table 3). `test` installs them when
# it can (root with apt-get; `apt-get update` only if the first try fails) and never fails for
# them: without them those tests skip, and one line says why.
DEBIAN_PACKAGES := chromium chromium-driver dataset-fashion-mnist
# PyTorch Geometric, for the interop test of the graph attention layers with its GATConv: not a
# dependency (nor in [dev]) since its install may fail; `test` tries it the same way.
PYG_SPEC := torch_geometric>=2.5

test: $(STAMP)
	@missing=""; \
	for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" != 0 ]; then \
	  echo "tests needing$$missing will be skipped: not root to apt-get install them"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "tests needing$$missing will be skipped: no apt-get"; \
	else \
	  echo "installing$$missing (apt-get) for the tests that use them"; \
	  install="apt-get install -y -qq --no-install-recommends$$missing"; \
	  if DEBIAN_FRONTEND=noninteractive $$install >/dev/null 2>&1 \
	    || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive $$install >/dev/null 2>&1; }; \
	  then :; else echo "tests needing$$missing will be skipped: apt-get install failed"; fi; \
	fi
	@$(PY) -c "import torch_geometric" 2>/dev/null \
	  || $(PY) -m pip install --quiet "$(PYG_SPEC)" >/dev/null 2>&1 \
	  || echo "the PyG interop test will be skipped: pip install $(PYG_SPEC) failed"
	@$(PY) -c "import mkdocs, mkdocstrings, material" 2>/dev/null \
	  || $(PY) -m pip install --quiet -e ".[docs]" >/dev/null 2>&1 \
	  || echo "the docs site test will be skipped: pip install -e .[docs] failed"
	$(PY) -m pytest -n 2 -q

# The docs site (mkdocs.yml) into site/, strict: a broken link, reference or docstring fails it.
docs: $(STAMP)
	@$(PY) -c "import mkdocs, mkdocstrings, material" 2>/dev/null || $(PY) -m pip install --quiet -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
