# The two commands of the README: `make demo` and `make test`. Both create .venv and install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STORE := .forensics-demo

.PHONY: demo test install bytecode sysdeps bench fuzz clean golden

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# the package's bytecode, written ahead (in a moment when up to date): where PYTHONDONTWRITEBYTECODE is set, as
# on our CI machines, every command would compile the modules it imports from source again (0.1-0.15 s each)
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q forensics

# Debian packages the tests and the benchmark use (headless Chromium for the HTML test, ripgrep and lnav
# for the benchmark). Installed when missing; skipped (the tests that need them then skip) when apt is absent.
sysdeps:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v rg >/dev/null 2>&1; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium ripgrep lnav >/dev/null) \
	      || echo "sysdeps: apt-get failed; browser and benchmark tests will be skipped" >&2; \
	  else echo "sysdeps: cannot install chromium/ripgrep (no root apt); those tests will be skipped" >&2; fi; \
	fi

demo: $(STAMP) bytecode
	rm -rf $(STORE)
	$(BIN)/forensics --store $(STORE) ingest samples/incident
	$(BIN)/forensics --store $(STORE) timeline --since 2025-05-25
	mkdir -p reports
	$(BIN)/forensics --store $(STORE) report --incident 2025-05-25 -o reports/2025-05-25.md
	$(BIN)/forensics --store $(STORE) report --incident 2025-05-25 --format html -o reports/2025-05-25.html
	@echo "wrote reports/2025-05-25.md and reports/2025-05-25.html"

test: $(STAMP) bytecode sysdeps
	$(BIN)/python -m pytest

golden: $(STAMP)
	$(BIN)/python -m pytest --update-golden

bench: $(STAMP) bytecode sysdeps
	$(BIN)/python bench/run.py --scaling --big-mb 4096

# coverage-guided fuzzing (atheris) of ingest, formats and rule packs; each harness 10 minutes
fuzz: $(STAMP)
	$(BIN)/python fuzz/run.py --seconds 600

clean:
	rm -rf $(VENV) $(STORE) .forensics reports
