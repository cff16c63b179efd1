# The two commands a newcomer needs: `make run` and `make test`. Everything else is `reprise --help`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test env services lint typecheck pytest clean

# The environment: a venv at the project root. requirements.lock pins every dependency of .[worker,test]
# and of the client with its hashes: installed as it is (pip checks each file's hash), then the two
# projects themselves, editable, without resolving anything again.
$(STAMP): pyproject.toml requirements.lock clients/python/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e '.[worker,test]' -e ./clients/python
	@touch $(STAMP)

env: $(STAMP)

services: env
	$(BIN)/reprise services up
	$(BIN)/reprise migrate

run: services
	$(BIN)/reprise models lab
	$(BIN)/reprise run

lint: env
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: env
	$(BIN)/mypy .

pytest: services
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/pytest

test: lint typecheck pytest

clean:
	-$(BIN)/reprise services down
	rm -rf .reprise
