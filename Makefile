# The two commands of the README: `make demo` and `make test`. Each sets up .venv on first
# use (Python >= 3.11, `-e .[test]`) and installs again whenever pyproject.toml changes.
#   make test ARGS="-k cli -x"     extra pytest arguments
#   make bench ARGS="--json out.json"
#   make test PYTHON=/usr/bin/python3.12   the interpreter that creates .venv
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench
PYTHON ?=
CANDIDATES := $(if $(PYTHON),$(PYTHON),python3.11 python3 python3.12 python3.13 python3.14)
IS_311 := -c 'import sys; sys.exit(sys.version_info < (3, 11))'
ARGS ?=

.PHONY: demo test bench info venv clean

venv: $(STAMP)

# Reuse .venv when its interpreter runs and is >= 3.11; otherwise (re)create it with the
# first candidate that is. The stamp is written only after pip succeeds, so a failed or
# interrupted install is retried by the next make.
$(STAMP): pyproject.toml $(BIN)/python
	@set -e; \
	if ! $(BIN)/python $(IS_311) >/dev/null 2>&1; then \
	  py=""; \
	  for p in $(CANDIDATES); do \
	    if command -v "$$p" >/dev/null 2>&1 && "$$p" $(IS_311) >/dev/null 2>&1; then py="$$p"; break; fi; \
	  done; \
	  if [ -z "$$py" ]; then \
	    echo "error: ember needs Python 3.11 or newer; none of [$(CANDIDATES)] is (set PYTHON=/path/to/python3.11)" >&2; \
	    exit 1; \
	  fi; \
	  echo "creating $(VENV) with $$py ($$("$$py" -c 'import sys; print(sys.version.split()[0])'))"; \
	  rm -rf $(VENV); \
	  "$$py" -m venv $(VENV) || { echo "error: '$$py -m venv' failed; on Debian/Ubuntu install the python3-venv package for this Python" >&2; rm -rf $(VENV); exit 1; }; \
	fi; \
	rm -f $(STAMP) $(BENCH_STAMP); \
	echo "installing ember and its test dependencies into $(VENV) (pip install -e '.[test,train]')"; \
	$(BIN)/python -m pip install --quiet -e ".[test,train]"; \
	touch $(STAMP)

# A venv whose interpreter vanished (deleted, or its base Python uninstalled) is rebuilt.
$(BIN)/python:
	@rm -f $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test,train,bench]"
	@touch $(BENCH_STAMP)

demo: $(STAMP)
	$(BIN)/ember demo $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

bench: $(BENCH_STAMP)
	$(BIN)/python bench/overhead.py $(ARGS)

info: $(STAMP)
	$(BIN)/ember info $(ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis
