"""The project's development tooling, kept in the checkout and never packaged: the chaos campaign
(``chaos``, ``make chaos``), the distribution builder (``distribution``, ``make dist``), Spark's
processes read from /proc (``processes``, for the campaign and the benchmarks) and the logging
set-up of the tests' Spark processes (``python_logging``).

It builds on the test kit the wheel ships (``pyspark_eos.testing``); nothing in ``pyspark_eos``
imports it. The checkout is on ``sys.path`` of the virtual environment (``make setup`` installs
the package in editable compat mode), so Spark's Python workers find it too."""
