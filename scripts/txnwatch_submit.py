"""spark-submit entry point for txnwatch: ``spark-submit [options] scripts/txnwatch_submit.py <txnwatch args>``.

spark-submit runs a Python *file*, not a module; submitting ``streaming/cli.py`` directly would
put ``streaming/`` first on ``sys.path`` where ``streaming/inspect.py`` shadows the standard
library's ``inspect``. This launcher only calls :func:`streaming.cli.main`.
"""

import sys

from streaming.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
