# README's two commands: `make train` (the main job) and `make test` (the whole suite, and the docs build).
# Both create .venv on first use and install the pinned dependencies into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.levelray-installed
TRAIN_ARGS ?=

.PHONY: train test lint docs docs-serve install bench clean

install: $(STAMP)

# torch is installed first, pinned, so nothing can pull a multi-GB CUDA build in its place; constraints.txt
# pins everything the direct dependencies pull in.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 13), "levelray needs Python 3.11 or 3.12, found " + sys.version.split()[0]'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,lint,docs,wandb]'
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/levelray train $(TRAIN_ARGS)

# The package's folders, for vulture (dead code at 80% confidence; the suite also checks function and module
# lengths, tests/test_code_shape.py).
PACKAGE := actors contracts deploy families learner level_service levelray policy replay_service

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/vulture --min-confidence 80 $(PACKAGE)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
	sh deploy/setup/install-prometheus.sh
	sh deploy/setup/install-chromium.sh
	$(PY) -m pytest -q tests

# `ruff check` only, as in `make test`: the code is wrapped by hand at 120 columns, and `ruff format` would
# rewrap 66 files without changing what they do, so the formatter is not enforced.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/vulture --min-confidence 80 $(PACKAGE)

# The documentation site (mkdocs.yml): docs/hooks.py writes the generated reference pages first; --strict fails
# on a broken link, a missing page or a page left out of the nav.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

clean:
	rm -rf $(VENV) .pytest_cache site
