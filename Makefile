# The two README commands: `make lab` and `make test`. Both set up .venv first (idempotent: seconds when
# it is already up to date) and need only Python 3.11 and access to the package registry.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
ifeq ($(PYTHON),)
$(error no python3.11 or python3 found: install Python 3.11 (on Debian/Ubuntu: python3.11 python3.11-venv), or set PYTHON=/path/to/python3.11)
endif
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8888
# Jupyter refuses to run as root without --allow-root (containers, cloud notebooks, CI run as root).
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
# extra JupyterLab options, e.g. make lab LAB_ARGS="--no-browser --ip=0.0.0.0"
LAB_ARGS ?=

.PHONY: hub no-npm setup lab test test-helpers test-notebooks test-site site site-setup browser lint format full-run html data trt clean

# The proxy JupyterHub needs (`make hub`, Node.js), pinned in hub/package-lock.json: installed when npm is there;
# a failed install is said and retried by the next set-up (its stamp is written only on success).
NPM := $(shell command -v npm)
PROXY_STAMP := hub/node_modules/.installed

setup: $(STAMP) $(if $(NPM),$(PROXY_STAMP),no-npm)

$(PROXY_STAMP): hub/package.json hub/package-lock.json
	@npm ci --prefix hub --no-audit --no-fund --silent && touch $@ || \
		echo "npm ci failed: make hub will not work until a set-up installs its proxy; everything else is set up"

no-npm:
	@echo "no npm: the course's JupyterHub (make hub) needs Node.js and npm; everything else is set up"

# Packages go in with uv (pinned in requirements-uv.txt, installed into the venv by pip): it installs the 6 GB in
# parallel, 31 s against pip's 175 s on the course's 2-core machine, the same versions. It compiles the bytecode as
# pip does (+25 s): without it, where PYTHONDONTWRITEBYTECODE is set, every process that imports torch and
# Inductor compiles them again (14 s against 5 s here). uv does not read pip's configuration (pip.conf,
# PIP_INDEX_URL): where uv cannot be installed or fails (a private index only pip is set up for), pip installs
# them; INSTALLER=pip makes pip do it always. $(call INSTALL,args[,uv-only options]) installs args.
INSTALLER ?= uv
define INSTALL
if [ "$(INSTALLER)" = uv ] && [ -x $(BIN)/uv ] && $(BIN)/uv pip install --quiet $(2) --python $(BIN)/python $(1); then :; \
else if [ "$(INSTALLER)" = uv ] && [ -x $(BIN)/uv ]; then echo "uv could not install $(1): pip installs it"; fi; \
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(1); fi
endef

# Re-installs only when requirements.txt or pyproject.toml change (or the venv is missing).
$(STAMP): requirements.txt requirements-uv.txt pyproject.toml jupyter/overrides.json
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python 3.11+ is needed (found " + sys.version.split()[0] + "); set PYTHON=/path/to/python3.11"'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { echo "could not create $(VENV): on Debian/Ubuntu install python3.11-venv"; rm -rf $(VENV); exit 1; }
	@[ "$(INSTALLER)" != uv ] || $(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-uv.txt || \
		echo "could not install uv: pip installs the packages (slower)"
	@$(call INSTALL,-r requirements.txt,--compile-bytecode)
	@$(call INSTALL,--no-deps -e .)
	@# JupyterLab opens on the course without asking to fetch news or check for updates (settings defaults)
	@mkdir -p $(VENV)/share/jupyter/lab/settings && cp jupyter/overrides.json $(VENV)/share/jupyter/lab/settings/
	@# nbstripout as a git filter: notebooks are committed without outputs whatever a run left in them (cell ids,
	@# stable here, are kept). Configured by hand, since `nbstripout --install` drops --keep-id.
	@if [ "$$(git rev-parse --show-toplevel 2>/dev/null)" = "$(CURDIR)" ]; then \
		git config filter.nbstripout.clean '"$(CURDIR)/$(BIN)/python" -m nbstripout --keep-id' && \
		git config filter.nbstripout.smudge cat && git config filter.nbstripout.required true; fi
	@touch $(STAMP)
	@echo "set-up complete: $(VENV)"

lab: setup
	$(BIN)/jupyter lab --notebook-dir=notebooks --port=$(PORT) $(LAB_ROOT) $(LAB_ARGS)

# A JupyterHub for a room of learners on this machine (TEACHING.md): as root, with the day's shared secret in
# COURSE_HUB_PASSWORD; every setting is an environment variable (hub/jupyterhub_config.py lists them).
hub: setup
	@test "$$(id -u)" = 0 || { echo "make hub runs as root: it creates each participant's Unix account"; exit 1; }
	@test -x hub/node_modules/.bin/configurable-http-proxy || { echo "no proxy: install Node.js and npm, then make setup"; exit 1; }
	$(BIN)/jupyterhub -f hub/jupyterhub_config.py

# Lint, and the layout ruff format gives (notebooks are linted, not reformatted: pyproject.toml says why).
lint: setup
	$(BIN)/ruff check conftest.py helpers tests scripts notebooks hub website
	$(BIN)/ruff format --check conftest.py helpers tests scripts notebooks hub website
	$(BIN)/python scripts/check_cells.py

# Apply the layout `make lint` checks.
format: setup
	$(BIN)/ruff format conftest.py helpers tests scripts notebooks hub website

# Their compile caches and records go to outputs/test too, not into the cache and results `make lab` uses. On
# one worker more than the usable cores (pytest-xdist, at most 4; a CPU quota counts): a test often waits on a
# subprocess, a server or a kernel. A file's tests stay on one worker: its module fixtures run once.
test-helpers: setup
	COURSE_MODE=quick COURSE_OUTPUTS=$(CURDIR)/outputs/test $(BIN)/python -m pytest --durations=5 \
		-n $$($(BIN)/python -c 'from helpers.device import usable_cpus; print(min(4, usable_cpus() + 1))') \
		--dist loadfile -m "not notebook and not site" tests

# Every notebook in quick mode in a Jupyter kernel through nbmake (at most NB_TIMEOUT seconds a cell), with the
# course's checks on what it executed (conftest.py: stderr held to the allow-list, figures shown, no engine left);
# records, compile caches and the executed copies (outputs/test/executed) go to outputs/test. Two notebooks at a
# time where two cores are usable, each kernel with its share of them (a notebook alone kept 1.2 of 2 cores busy:
# kernels starting, processes launching, compilers and servers waiting); quick mode is a smoke test, and what a
# notebook measures beside another is disturbed: its verdicts may say so. NB_WORKERS=1 runs them one by one.
NB_TIMEOUT ?= 300
NB_WORKERS ?= $$($(BIN)/python -c 'from helpers.device import usable_cpus; print(min(2, usable_cpus()))')
test-notebooks: setup
	COURSE_MODE=quick COURSE_OUTPUTS=$(CURDIR)/outputs/test $(BIN)/python -m pytest --nbmake \
		--nbmake-timeout=$(NB_TIMEOUT) -n $(NB_WORKERS) --durations=0 notebooks

# The course website from the executed copies test-notebooks left in outputs/test/executed, checked in headless
# Chromium (tests/test_site.py): the landing page, two notebook pages and their plots, the offline search.
test-site: site-setup browser
	COURSE_MODE=quick COURSE_OUTPUTS=$(CURDIR)/outputs/test $(BIN)/python -m pytest --durations=5 -m site tests/test_site.py

# What CI runs (.ci/run): lint, the helpers' unit tests, every notebook in quick mode, then the website built from
# those runs and checked in a browser (after them, also under make -j).
test: lint test-helpers test-notebooks
	@$(MAKE) --no-print-directory test-site

# Every notebook in full mode, executed copies and results written to OUT (default outputs/full-run).
full-run: setup
	$(BIN)/python scripts/full_run.py $(or $(OUT),outputs/full-run)

# The course website (outputs/site/README.html, or SITE_OUT): Sphinx + myst-nb over the executed copies of
# `make full-run` (EXECUTED=outputs/test/executed for the quick copies `make test` leaves); requirements-site.txt.
site: site-setup
	$(BIN)/python scripts/build_site.py $(if $(EXECUTED),--executed $(EXECUTED)) $(if $(SITE_OUT),--out $(SITE_OUT))

SITE_STAMP := $(VENV)/.site-installed
site-setup: $(SITE_STAMP)
$(SITE_STAMP): requirements-site.txt $(STAMP)
	@$(call INSTALL,-r requirements-site.txt,--compile-bytecode)
	@touch $@

# Headless Chromium and its driver for the site's browser check: Debian's packages, installed when missing where
# this runs as root with apt-get (CI); elsewhere, or if the install fails, the check is a named skip (tests/test_site.py
# fails instead where COURSE_REQUIRE_BROWSER is set, as .ci/run sets it).
browser:
	@if { command -v chromium || command -v chromium-browser || command -v google-chrome; } >/dev/null && \
		command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium and chromium-driver for the site's browser check"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
		echo "could not install chromium and chromium-driver: the site's browser check will be skipped"; \
	else echo "no Chromium: the site's browser check will be skipped (Debian: apt-get install chromium chromium-driver)"; fi

# HTML handouts with outputs, one per notebook, in outputs/html (MODE=quick for a fast set; full by default).
html: setup
	@for nb in notebooks/[0-9][0-9]_*.ipynb; do \
		$(BIN)/python scripts/run_notebook.py $$nb --html -p MODE $(or $(MODE),full) || exit 1; \
	done

# Regenerate data/ (needs the packages in scripts/requirements-data.txt).
data: setup
	$(BIN)/python -m pip install --quiet -r scripts/requirements-data.txt
	$(BIN)/python scripts/make_data.py
	$(BIN)/python scripts/train_digits.py
	$(BIN)/python scripts/train_lms.py  # about 15 minutes on 2 cores; the corpus itself is not rebuilt (see data/README.md)
	$(BIN)/python scripts/train_resnet.py  # about 13 minutes on 2 cores

# Optional, by hand on a machine with an NVIDIA GPU (a large download): TensorRT 10 for ONNX Runtime's TensorRT
# provider (requirements-trt.txt says why 10 and not 11), then what the provider needs that is still missing.
trt: setup
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements-trt.txt
	$(BIN)/python -c 'from helpers import onnxrt; print(onnxrt.tensorrt_report())'

# Everything a run produced: results, traces, exported models, handouts, compile caches.
clean:
	rm -rf outputs .pytest_cache .ruff_cache
	find . -path ./.venv -prune -o \( -name .ipynb_checkpoints -o -name __pycache__ \) -type d -print0 | xargs -0 rm -rf
