# maya: every target creates .venv on first use and installs the project into it.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
GPU     ?= cpu
export MAYA_WAREHOUSE ?= $(CURDIR)/warehouse

FRAMEWORKS     := tests/integration/frameworks
FRAMEWORKS_STAMP := $(VENV)/.frameworks-installed
TORCH_NEXT     := $(FRAMEWORKS)/torch_next
NEXT_VENV      := .venv-torch-next
NEXT_STAMP     := $(NEXT_VENV)/.installed

.PHONY: setup constraints test test-fast test-frameworks test-torch-next lint demo calibrate dagster mlflow bench validate evaluate search-eval clean

$(STAMP): pyproject.toml constraints.txt
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: on machines without a GPU this resolves to the CPU wheel.
	$(BIN)/pip install -q "torch==2.13.0" || $(BIN)/pip install -q "torch>=2.13,<2.15"
	@# constraints.txt: the versions the suite last passed with (`make constraints` regenerates it)
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)          ## create .venv and install maya with its dependencies

constraints: $(STAMP)    ## regenerate constraints.txt from .venv (pip freeze without maya itself and torch, pinned above)
	$(BIN)/pip freeze --exclude-editable | grep -v -E '^(torch==|maya==|-e |#)' > constraints.txt

test: $(STAMP)           ## the whole suite, unit then integration tests (CPU only, no GPU needed)
	$(BIN)/python -m pytest -q -x --durations=15 tests/unit tests/integration $(PYTEST_ARGS)

test-fast: $(STAMP)      ## the unit tests alone: no worker processes, no examples (under 2 minutes)
	$(BIN)/python -m pytest -q -x tests/unit

$(FRAMEWORKS_STAMP): $(STAMP) $(FRAMEWORKS)/requirements.txt $(FRAMEWORKS)/constraints.txt
	@# pinned framework versions that work with the torch pin; the constraints file keeps pip from replacing torch
	$(BIN)/pip install -q -c $(FRAMEWORKS)/constraints.txt -r $(FRAMEWORKS)/requirements.txt
	touch $(FRAMEWORKS_STAMP)

test-frameworks: $(FRAMEWORKS_STAMP)  ## install DeepSpeed, Accelerate, Lightning, megatron-core, Triton...; one program per framework
	$(BIN)/python -m pytest -q -x --durations=0 $(FRAMEWORKS)

$(NEXT_STAMP): pyproject.toml $(TORCH_NEXT)/requirements.txt $(TORCH_NEXT)/constraints.txt
	test -d $(NEXT_VENV) || $(PY) -m venv $(NEXT_VENV)
	$(NEXT_VENV)/bin/pip install -q --upgrade pip
	@# torch's newest release the project allows, first (a CUDA build; it runs on the CPU as well)
	$(NEXT_VENV)/bin/pip install -q -c $(TORCH_NEXT)/constraints.txt torch
	$(NEXT_VENV)/bin/pip install -q -c $(TORCH_NEXT)/constraints.txt -e ".[dev]" -r $(TORCH_NEXT)/requirements.txt
	touch $(NEXT_STAMP)

test-torch-next: $(NEXT_STAMP)  ## torch 2.14.1 in a venv of its own (.venv-torch-next): the unit tests, and torchtitan 0.3.0, which needs it
	$(NEXT_VENV)/bin/python -m pytest -q -x --durations=5 tests/unit $(TORCH_NEXT)

lint: $(STAMP)           ## ruff over the project, and the import layers (import-linter contracts in pyproject.toml)
	$(BIN)/ruff check emulator maya_models pipelines tests examples
	$(BIN)/lint-imports

demo: $(STAMP)           ## default h100 predictors from reference data, then predict an example on 8xH100
	$(BIN)/python -m maya_models.bootstrap --gpu h100
	$(BIN)/maya predict --gpu h100 --nproc-per-node 8 --iterations 2 --out out/demo \
	    examples/fsdp2.py --model gpt2-small --batch-size 8 --steps 2

calibrate: $(STAMP)      ## run the calibration chain for GPU=<part> (default cpu)
	$(BIN)/maya calibrate --gpu $(GPU)

dagster: $(STAMP)        ## open the Dagster UI on the pipelines
	DAGSTER_HOME=$${DAGSTER_HOME:-$(CURDIR)/warehouse/dagster_home}; \
	$(BIN)/python -c "import sys; from pipelines.resources import ensure_instance; ensure_instance(sys.argv[1])" $$DAGSTER_HOME; \
	DAGSTER_HOME=$$DAGSTER_HOME $(BIN)/dagster dev -m pipelines.definitions

mlflow: $(STAMP)         ## open the MLflow UI on the local store
	$(BIN)/mlflow ui --backend-store-uri $${MLFLOW_TRACKING_URI:-sqlite:///$(MAYA_WAREHOUSE)/mlflow.db}

bench: $(STAMP)          ## emulation and simulation speed benchmarks
	$(BIN)/python -m emulator.bench

validate: $(STAMP)       ## prediction error against real CPU runs and published GPU measurements
	@# llm-analysis (a baseline) needs only `fire` at run time; its declared pins would pull transformers 4.31
	$(BIN)/pip install -q --no-deps "llm-analysis==0.2.2" "fire>=0.5" "termcolor>=2" || echo "llm-analysis baseline unavailable"
	$(BIN)/python -m pipelines.validation $(ARGS)

search-eval: $(STAMP)    ## maya search vs measured optima (vTrain groups) and search efficiency; hours on 2 cores, cached
	$(BIN)/pip install -q --no-deps "llm-analysis==0.2.2" "fire>=0.5" "termcolor>=2" || echo "llm-analysis baseline unavailable"
	$(BIN)/python -m pipelines.search $(ARGS)

evaluate: $(STAMP)       ## predictor accuracy on held-out shapes and the unseen-GPU holdout
	$(BIN)/python -m maya_models.evaluate

clean:
	rm -rf $(VENV) $(NEXT_VENV) warehouse/measurements warehouse/maya.duckdb warehouse/mlflow.db warehouse/mlartifacts
