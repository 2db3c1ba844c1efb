#!/usr/bin/env bash
# spark-submit a txnwatch command to a Spark cluster (docs/deployment.md).
#
#   scripts/spark-submit-txnwatch.sh [spark-submit options] -- <txnwatch arguments>
#
# e.g.
#   scripts/spark-submit-txnwatch.sh --master spark://10.0.0.5:7077 \
#       --conf spark.executor.memory=2g -- run --source kafka --checkpoint hdfs:///txnwatch/prod
#
# Uses the spark-submit of the pyspark package installed in the interpreter $TXNWATCH_PYTHON
# (default: .venv/bin/python of this checkout) unless SPARK_HOME is set, and runs the driver and
# the executors' Python workers with that same interpreter path (spark.pyspark.python) unless
# a --conf spark.pyspark.python=... is given. That path must exist on every worker node with
# txnwatch installed (same venv path on every node, a wheel installed system-wide, or see
# docs/deployment.md for spark.archives / --py-files).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${TXNWATCH_PYTHON:-$here/../.venv/bin/python}"
py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")"
if [[ -z "${SPARK_HOME:-}" ]]; then
  SPARK_HOME="$("$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
  export SPARK_HOME
fi

submit_opts=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  submit_opts+=("$1")
  shift
done
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [spark-submit options] -- <txnwatch arguments>" >&2
  exit 64
fi
shift  # the --

has_python_conf=false
for o in "${submit_opts[@]+"${submit_opts[@]}"}"; do
  [[ "$o" == spark.pyspark.python=* ]] && has_python_conf=true
done
extra=()
if ! $has_python_conf; then
  extra+=(--conf "spark.pyspark.python=$py" --conf "spark.pyspark.driver.python=$py")
fi
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$py}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$py}"

exec "$SPARK_HOME/bin/spark-submit" "${extra[@]+"${extra[@]}"}" "${submit_opts[@]+"${submit_opts[@]}"}" \
  "$here/txnwatch_submit.py" "$@"
