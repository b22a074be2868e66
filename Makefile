# The README's two commands. `make test` is what CI runs (.ci/run).
VENV ?= .venv
PY := $(VENV)/bin/python
AGENTBAKE := $(VENV)/bin/agentbake

.PHONY: test demo lint bench dev engine bases chromium docs

# Builds behind an intercepting HTTPS proxy need its CA. `agentbake build` takes the bundle named by
# SSL_CERT_FILE / REQUESTS_CA_BUNDLE / NODE_EXTRA_CA_CERTS; when none is set, name the system one.
SYSTEM_CA := /etc/ssl/certs/ca-certificates.crt
ifeq ($(SSL_CERT_FILE)$(REQUESTS_CA_BUNDLE)$(NODE_EXTRA_CA_CERTS),)
ifneq ($(wildcard $(SYSTEM_CA)),)
export SSL_CERT_FILE := $(SYSTEM_CA)
endif
endif

dev: $(VENV)/.installed

# The extras declare ranges; constraints/ci.txt pins what CI tests with.
$(VENV)/.installed: pyproject.toml constraints/ci.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints/ci.txt -e '.[dev,gateway]'
	touch $@

# A Docker engine that answers (installed and started here when possible).
engine:
	scripts/ensure-engine

# Base images for the catalog: pulled when a registry answers, else built offline with debootstrap.
bases: dev engine
	scripts/ensure-bases $(PY)

# Debian's Chromium, which the report's tests load pages in (headless).
chromium:
	scripts/ensure-chromium

test: dev engine bases chromium
	$(VENV)/bin/ruff check agentbake tests bench
	$(VENV)/bin/ruff format --check agentbake tests bench
	$(VENV)/bin/pytest --durations=25

# The main job on a fresh machine: the claude-code image (built unless the engine has its tag), then the
# first example task through the real Claude Code against the built-in scripted model; the result, then
# what the gateway captured.
DEMO_OUT ?= out/demo
demo: dev engine bases
	$(AGENTBAKE) build claude-code
	rm -rf $(DEMO_OUT)
	$(AGENTBAKE) run claude-code --path examples/tasks/write-file --upstream scripted --rollouts-dir $(DEMO_OUT)
	$(AGENTBAKE) trace summary $(DEMO_OUT)/*/trace.jsonl

lint: dev
	$(VENV)/bin/ruff check agentbake tests bench
	$(VENV)/bin/ruff format --check agentbake tests bench

bench: dev engine bases
	$(PY) bench/buildkit/bench.py

# The docs site (mkdocs.yml) into site/, strict as `make test` builds it; `.venv/bin/mkdocs serve` to browse.
docs: dev
	$(VENV)/bin/mkdocs build --strict -d site
