"""Logging for every Python process of a test's Spark application.

Spark starts its Python processes itself (the driver-side stream reader, the daemon that forks
the task workers) and nothing configures ``logging`` there: the library's INFO lines, which tell
what a task or a plan waited for, are lost. A directory holding this module, put first on
PYTHONPATH, makes Python import it at start-up in each of them (``python_logging.environment``).
"""
import logging
import os
import sys

_LEVEL = os.environ.get("EOS_KAFKA_TEST_LOG_LEVEL")
if _LEVEL:
    logging.basicConfig(level=_LEVEL, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    # py4j's per-call lines would drown the library's.
    logging.getLogger("py4j").setLevel(logging.WARNING)
