# The two set-up commands of the README: `make demo` and `make test`. Everything they need is installed here.
PYTHON ?= $(shell bash scripts/python.sh)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit e2e k8s-binaries kueue-binary helm-binary image browser clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	@mkdir -p out
	$(BIN)/gpuscale fit --cluster examples/seed-pools/cluster.yaml --pools examples/seed-pools/pools.yaml
	$(BIN)/gpuscale compare default --policy gpuscale --policy ca-defaults --html out/demo.html --json out/demo.json
	@echo "Report: out/demo.html (open it in a browser); numbers: out/demo.json"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

k8s-binaries:
	bash scripts/k8s-binaries.sh

kueue-binary:
	bash scripts/kueue-binary.sh

helm-binary:
	bash scripts/helm-binary.sh

# The container image, built here with buildah and smoke-run (docs/install.md); not part of `test` (minutes cold).
image: $(STAMP)
	PYTHON=$(BIN)/python bash scripts/image.sh

browser:
	bash scripts/chromium.sh

unit: $(STAMP) helm-binary
	GPUSCALE_HELM_BIN=$$(bash scripts/helm-binary.sh | tail -1) $(BIN)/pytest -m 'not e2e'

e2e: $(STAMP) k8s-binaries kueue-binary helm-binary
	GPUSCALE_HELM_BIN=$$(bash scripts/helm-binary.sh | tail -1) GPUSCALE_K8S_BIN=$$(bash scripts/k8s-binaries.sh | tail -1) GPUSCALE_KUEUE_BIN=$$(bash scripts/kueue-binary.sh | tail -1) $(BIN)/pytest -m e2e

test: $(STAMP) lint typecheck k8s-binaries kueue-binary helm-binary browser
	GPUSCALE_HELM_BIN=$$(bash scripts/helm-binary.sh | tail -1) GPUSCALE_K8S_BIN=$$(bash scripts/k8s-binaries.sh | tail -1) GPUSCALE_KUEUE_BIN=$$(bash scripts/kueue-binary.sh | tail -1) $(BIN)/pytest

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
