"""``python -m pyspark_eos status|abort-lingering --bootstrap-servers ... --group ...``,
``python -m pyspark_eos adopt-checkpoint --checkpoint DIR --bootstrap-servers ... --group ...``, or
``python -m pyspark_eos compile-pyspark-zip [--spark-home DIR]``"""
import sys

from .operator.cli import main

sys.exit(main())
