#!/usr/bin/env bash
# Creates .venv (Python 3.11+) with txnwatch and its test extras, after checking for Java 17+,
# and installs headless Chromium + its WebDriver (Debian packages) for the status-page browser
# tests and kubectl (Debian's kubernetes-client) for the manifest tests when they are missing. Idempotent: re-running only reinstalls when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
  echo "txnwatch: Java 17 or newer is required by Spark and was not found on PATH." >&2
  echo "          Install a JDK 17+ (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and retry." >&2
  exit 3
fi
java_major=$(java -version 2>&1 | sed -nE 's/.*version "([0-9]+)(\.[0-9]+)*.*/\1/p' | head -1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "txnwatch: Java 17 or newer is required by Spark; found: $(java -version 2>&1 | head -1)." >&2
  echo "          Install a JDK 17+ (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and retry." >&2
  exit 3
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
if [ -z "$PY" ]; then
  echo "txnwatch: Python 3.11 or newer is required and was not found (set PYTHON=/path/to/python3.11)." >&2
  exit 3
fi

# The status page's browser tests (tests/test_ui_browser.py) drive Debian's chromium with
# chromium-driver through Selenium. TXNWATCH_SKIP_BROWSER=1 skips this step (the tests then skip).
if [ "${TXNWATCH_SKIP_BROWSER:-0}" != "1" ] && ! { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }; then
  echo "txnwatch: installing chromium and chromium-driver for the browser tests (apt-get)..." >&2
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo_cmd="sudo -n"; fi
  fi
  if ! command -v apt-get >/dev/null 2>&1 || \
     ! { $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
         $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
           chromium chromium-driver >/dev/null; }; then
    echo "txnwatch: could not install chromium + chromium-driver (needs apt-get and root or passwordless sudo)." >&2
    echo "          Install them yourself (Debian/Ubuntu: apt-get install chromium chromium-driver), or set" >&2
    echo "          TXNWATCH_SKIP_BROWSER=1 to run without the browser tests (they are then skipped)." >&2
    exit 3
  fi
fi

# The Kubernetes manifests' tests (tests/test_deploy_kubernetes.py) render deploy/kubernetes with
# `kubectl kustomize` (Debian's kubernetes-client). TXNWATCH_SKIP_KUBECTL=1 skips this step; the
# tests then skip outside CI and fail under CI=true.
if [ "${TXNWATCH_SKIP_KUBECTL:-0}" != "1" ] && ! command -v kubectl >/dev/null 2>&1; then
  echo "txnwatch: installing kubernetes-client (kubectl) for the manifest tests (apt-get)..." >&2
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo_cmd="sudo -n"; fi
  fi
  if ! command -v apt-get >/dev/null 2>&1 || \
     ! { $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
         $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kubernetes-client >/dev/null; }; then
    echo "txnwatch: could not install kubernetes-client (needs apt-get and root or passwordless sudo)." >&2
    echo "          Install kubectl yourself (Debian/Ubuntu: apt-get install kubernetes-client), or set" >&2
    echo "          TXNWATCH_SKIP_KUBECTL=1 to run without the manifest rendering tests (skipped; under CI they fail)." >&2
    exit 3
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.txnwatch-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[test]"
  touch "$stamp"
fi
