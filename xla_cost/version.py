"""The version of xla_cost, declared once (pyproject.toml reads it)."""

__version__ = "0.1.0"
