# The two set-up commands of the README: `make demo` and `make test`.
.PHONY: demo test lint bench setup

setup:
	./scripts/bootstrap.sh

# The demo needs no browser and no kubectl: skip the installs that only tests use.
demo:
	TXNWATCH_SKIP_BROWSER=1 TXNWATCH_SKIP_KUBECTL=1 ./scripts/bootstrap.sh
	.venv/bin/txnwatch demo

test: setup
	.venv/bin/python -m pytest

lint: setup
	.venv/bin/ruff check .

bench: setup
	.venv/bin/python bench/decode.py
