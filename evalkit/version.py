"""The package version, in a module of its own so that every layer can name it without
importing the package's composition (``evalkit/__init__.py``)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
