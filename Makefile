# The two set-up commands of the README: `make demo` and `make test`.
.PHONY: demo test lint bench setup

setup:
	./scripts/bootstrap.sh

# The demo needs no browser: skip the Chromium install that only the status-page tests use.
demo:
	TXNWATCH_SKIP_BROWSER=1 ./scripts/bootstrap.sh
	.venv/bin/txnwatch demo

test: setup
	.venv/bin/python -m pytest

lint: setup
	.venv/bin/ruff check .

bench: setup
	.venv/bin/python bench/decode.py
