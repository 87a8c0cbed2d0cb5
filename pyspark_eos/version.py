"""The package's version: the wheel's, the ``--packages`` artifact's and ``pyspark_eos.__version__``
(setup.cfg and devtools/distribution.py read it here), and the one the records it writes name."""

__version__ = "0.1.0"
