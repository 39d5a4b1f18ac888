"""evalkit's tests.  They mirror the package: the tests of ``evalkit/<pkg>/<module>.py`` are
``tests/<pkg>/test_<module>*.py`` (README, "Development"; ``tools/mutate.py`` finds them so).
"""
