"""Spark's Python processes started warm: a fork server that has imported, once, what every daemon
of a PySpark application and its workers import (``pyspark_eos.daemon`` is the module Spark runs).
"""
