# Model Probe: `make run` starts the dashboard, `make test` runs the whole test suite (`make test-fast`: the fast tier).
# Both create .venv and install on first use. torch is installed first, from its
# exact pin in requirements.txt, so that nothing pulls a CUDA build.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_PIN := $(shell grep -E '^torch==' requirements.txt)

BENCH_WORKSPACE ?= .bench-workspace
BENCHMARKS := default_models generator_check generators sampler table2 matrix_defaults defuse_noise defuse_protocols scenes scenes_probe colour cold_start watch user_data scale_out real_size defuse_real_size mutation suite_tiers
# The same scripts on real MNIST (the README's "Real MNIST"): the 10,000 test images, split 80/20.
MNIST_DIR ?= ../shared/data/mnist-t10k
MNIST_BENCHMARKS := zoo_budgets table2 matrix_defaults sampler generator_check
MNIST_QUICK := zoo_budgets table2 sampler
# The README's MNIST zoo table: this grid, two one-thread models at once.
ZOO_MNIST_ARGS := --epochs 15,30 --betas 1,4 --gan-epochs 15,30 --jobs 2 --threads 1

.PHONY: install run test test-fast test-shuffled fuzz notebooks wheel-check bench bench-quick clean-venv

$(STAMP): requirements.txt requirements-ray.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet -r requirements.txt -r requirements-ray.txt -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/probe ui

# One pytest-xdist worker per core (tests/conftest.py gives each one thread); the tests that share the
# session's regression suite stay on one worker.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadgroup --durations=25

# The same suite in a shuffled order (pytest-random-order; the seed is printed, --random-order-seed=N repeats it):
# every test sets up what it needs, so no order may fail.
test-shuffled: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadgroup --random-order-bucket=global

# The property tests with many random examples (CI runs them derandomized: the same examples every time). A
# failure found here is fixed in the product and kept as an @example in the test.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest tests/app/test_bad_input.py tests/unit/test_scaleout.py -k "spec or messages or split"

# The fast tier, for while you work: everything but the slow, e2e and ray tiers (docs/testing.md), in parallel.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadgroup -m "not slow and not e2e and not ray" --durations=10

# The example notebooks, executed top to bottom in a throw-away workspace (CI runs this after the tests).
notebooks: $(STAMP)
	$(BIN)/python examples/run_notebooks.py

# Packaging, as a new user gets it: the built wheel and its declared dependencies (from the package index) in an
# isolated environment, then `probe --version` and the installed copy of probe_core (CI runs this; the suite's
# wheel test installs the wheel alone and serves the app from it).
WHEEL_CHECK_DIR ?= .wheel-check
wheel-check: $(STAMP)
	rm -rf $(WHEEL_CHECK_DIR)
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w $(WHEEL_CHECK_DIR)/dist .
	$(PYTHON) -m venv $(WHEEL_CHECK_DIR)/env
	$(WHEEL_CHECK_DIR)/env/bin/pip install --quiet --no-compile "$(TORCH_PIN)"
	$(WHEEL_CHECK_DIR)/env/bin/pip install --quiet --no-compile $(WHEEL_CHECK_DIR)/dist/model_probe-*.whl
	cd $(WHEEL_CHECK_DIR) && env/bin/probe --version && env/bin/python -c "import probe_core, sys; \
	  sys.exit(0 if '/env/' in probe_core.__file__ else 'probe_core was not imported from the installed wheel')"
	rm -rf $(WHEEL_CHECK_DIR)

# Every figure in the README is printed by one of these (see each script's docstring).
bench: $(STAMP)
	for name in $(BENCHMARKS); do echo "== benchmarks/$$name.py"; \
	  $(BIN)/python benchmarks/$$name.py $$( [ $$name = scenes ] || [ $$name = default_models ] || [ $$name = mutation ] || [ $$name = suite_tiers ] || echo --workspace $(BENCH_WORKSPACE)) || exit 1; done
	for name in $(MNIST_BENCHMARKS); do echo "== benchmarks/$$name.py --dataset mnist"; \
	  PROBE_DATA_DIR=$(MNIST_DIR) $(BIN)/python benchmarks/$$name.py --dataset mnist --workspace $(BENCH_WORKSPACE)-mnist \
	  $$( [ $$name = zoo_budgets ] && echo $(ZOO_MNIST_ARGS) ) || exit 1; done
	for lengths in "" --equal-lengths; do echo "== benchmarks/sampler.py --dataset mnist --independence-moves 8 $$lengths"; \
	  PROBE_DATA_DIR=$(MNIST_DIR) $(BIN)/python benchmarks/sampler.py --dataset mnist --independence-moves 8 $$lengths \
	  --workspace $(BENCH_WORKSPACE)-mnist || exit 1; done
	echo "== benchmarks/defuse_protocols.py --dataset mnist --max-images 2000"; \
	  PROBE_DATA_DIR=$(MNIST_DIR) $(BIN)/python benchmarks/defuse_protocols.py --dataset mnist --max-images 2000 \
	  --workspace $(BENCH_WORKSPACE)-mnist

# The same scripts in their quick modes (smoke runs; CI runs these), in a throw-away workspace that starts from
# the shipped seed-0 default models (tests/data/*-defaults, when they still match the code): a quick mode
# proves its script's code path, not the training (benchmarks/default_models.py --quick trains every default).
bench-quick: $(STAMP)
	rm -rf $(BENCH_WORKSPACE)-quick
	$(BIN)/python tests/data/make_default_models.py --install $(BENCH_WORKSPACE)-quick
	for name in $(BENCHMARKS); do echo "== benchmarks/$$name.py --quick"; started=$$(date +%s); \
	  $(BIN)/python benchmarks/$$name.py --quick $$( [ $$name = scenes ] || [ $$name = default_models ] || [ $$name = mutation ] || [ $$name = suite_tiers ] || echo --workspace $(BENCH_WORKSPACE)-quick) || exit 1; \
	  echo "== benchmarks/$$name.py --quick took $$(( $$(date +%s) - started )) s"; done
	for name in $(MNIST_QUICK); do echo "== benchmarks/$$name.py --dataset mnist --quick"; started=$$(date +%s); \
	  PROBE_DATA_DIR=$(MNIST_DIR) $(BIN)/python benchmarks/$$name.py --dataset mnist --quick --workspace $(BENCH_WORKSPACE)-quick || exit 1; \
	  echo "== benchmarks/$$name.py --dataset mnist --quick took $$(( $$(date +%s) - started )) s"; done
	echo "== benchmarks/sampler.py --dataset mnist --quick --independence-moves 8 --equal-lengths"; \
	  PROBE_DATA_DIR=$(MNIST_DIR) $(BIN)/python benchmarks/sampler.py --dataset mnist --quick --independence-moves 8 \
	  --equal-lengths \
	  --workspace $(BENCH_WORKSPACE)-quick || exit 1
	rm -rf $(BENCH_WORKSPACE)-quick

clean-venv:
	rm -rf $(VENV)
