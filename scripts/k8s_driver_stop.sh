#!/bin/sh
# preStop hook of the txnwatch driver container (deploy/kubernetes): stop `txnwatch run` cleanly.
#
# The kubelet's SIGTERM reaches PID 1 (tini), which passes it to the spark-submit JVM; the JVM
# then exits without a clean stop (docs/deployment.md, "Stopping txnwatch run cleanly": exit 143,
# the next start re-runs the uncommitted micro-batch). The Python driver, a child of that JVM,
# stops after the current micro-batch on SIGTERM, and the JVM exits after it. So send SIGTERM to
# the Python driver and wait until it is gone; terminationGracePeriodSeconds bounds the wait.
pattern='^/opt/txnwatch/venv/bin/python[^ ]* [^ ]*txnwatch_submit\.py( |$)'
pids=$(pgrep -f "$pattern") || exit 0
# shellcheck disable=SC2086 # one or more pids, split on purpose
kill -TERM $pids
# shellcheck disable=SC2086
while kill -0 $pids 2>/dev/null; do
  sleep 1
done
