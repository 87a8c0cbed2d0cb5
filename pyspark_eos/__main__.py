"""``python -m pyspark_eos status|abort-lingering --bootstrap-servers ... --group ...``"""
import sys

from .operator.cli import main

sys.exit(main())
