# mptrain: `make install` sets up .venv with everything; `make test` runs the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: install test test-fast test-all lint bench docs clean

install:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,hub,tfds,mlflow]"
	@# Fashion-MNIST from Debian, so the quick start runs offline (skipped where apt is absent).
	@if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		($$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq dataset-fashion-mnist) \
		|| echo "note: could not install dataset-fashion-mnist; see docs/data.md"; \
	fi
	@# Slurm and munge, for the tests under a real Slurm (tests/slurm.py; they skip without them).
	@if ! command -v slurmctld >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge) \
		|| echo "note: could not install Slurm; the tests under a real Slurm will skip"; \
	fi
	@# iproute2's `ip netns`, for the multi-host tests' network namespaces (they skip without it).
	@if ! command -v ip >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && apt-get install -y -qq iproute2) \
		|| echo "note: could not install iproute2; the multi-host tests will skip"; \
	fi

# Every stage runs whatever an earlier one found, and each failure is named at the end: a lint
# finding must not hide a failing test, nor the first pytest stage the kernel-path one.
# Two pytest workers: most of a test's time is one-threaded (process start-up, tracing), so the
# suite takes about half as long on 2 cores; no more than 4, each worker holds TensorFlow.
# The last stage runs the tests whose outcome depends on the kernel path again, on the other
# one: oneDNN off is what TensorFlow does on AVX2-only CPUs (where it is off already: on).
test:
	@failed=""; \
	$(BIN)/ruff check mptrain tests bench docs || failed="$$failed ruff"; \
	$(BIN)/pytest -m "not slow" -n auto --maxprocesses 4 --dist worksteal --durations=15 \
		|| failed="$$failed tests"; \
	TF_ENABLE_ONEDNN_OPTS=$$($(BIN)/python -c "from mptrain.hardware.machine import onednn_enabled, \
	probe_cpu; print(0 if onednn_enabled(probe_cpu().flags) else 1)") \
	$(BIN)/pytest -m "kernel_path and not slow" -n auto --maxprocesses 4 -q -p no:warnings \
		|| failed="$$failed kernel-path-tests"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi; \
	echo "make test: every stage passed"

# The unit tier alone: no training, no processes (config, verdicts, monitor, guard, plan's
# choice, renderers, on recorded numbers); under a minute.
test-fast:
	$(BIN)/ruff check mptrain tests bench docs
	$(BIN)/pytest tests/unit -n auto --maxprocesses 4

test-all:
	$(BIN)/pytest -n auto --maxprocesses 4

lint:
	$(BIN)/ruff check mptrain tests bench docs

bench:
	$(BIN)/python bench/run_all.py

# docs/reference/ from the code: the experiment schema and the command line's help
# (tests/unit/test_docs.py fails when they are stale).
docs:
	$(BIN)/python docs/generate.py

clean:
	rm -rf $(VENV) runs build *.egg-info
