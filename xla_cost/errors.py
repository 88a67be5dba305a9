"""The exceptions xla_cost raises for bad input.

Every message says what was expected, what was received, and how to fix it, on one
line, so that the CLI can print it as is and exit with code 2.
"""

from __future__ import annotations

__all__ = [
    "XlaCostError",
    "InputError",
    "CostAnalysisUnavailableError",
    "quoted",
]


class XlaCostError(Exception):
    """Base class of the errors xla_cost raises on purpose; its message is one
    line: ``Expected EXPECTED, got RECEIVED instead. FIX``.

    Args:
      expected: what was expected, as a phrase (``a batch size of at least 1``).
      received: what came instead (``0``).
      fix: how to fix it, a sentence (None: none given).
    """

    def __init__(self, expected: str, received: str, fix: str | None = None):
        self.expected = expected
        self.received = received
        self.fix = fix
        # a received that quotes another error ending in "instead" (jax's, numpy's) says it once
        message = f"Expected {expected}, got {received}" + ("." if received.rstrip().endswith("instead") else
                                                           " instead.")
        if fix:
            message += f" {fix}"
        super().__init__(message)


class InputError(XlaCostError, ValueError):
    """A model, input, optimizer, loss or option that cannot be analysed as given.

    Args:
      expected, received, fix: as `XlaCostError` takes them.
    """


class CostAnalysisUnavailableError(XlaCostError, RuntimeError):
    """The backend compiled the program but gave no usable cost analysis.

    Args:
      expected, received, fix: as `XlaCostError` takes them.
    """


def quoted(exc: BaseException, text: str | None = None, limit: int | None = None) -> str:
    """Another error's message as a refusal quotes it: ``ValueError: 'its first line'``.

    Quoted, the foreign message reads apart from the refusal's own words around it (its
    ``instead.`` and fix), whatever punctuation it ends with.

    Args:
      exc: the error.
      text: its message as the refusal shows it (None: the first non-empty line of ``str(exc)``).
      limit: the most characters of ``text`` shown (the rest cut, with ``...``); None: all.
    """
    if text is None:
        text = next((line for line in str(exc).splitlines() if line.strip()), "")
    text = text.strip()
    if limit is not None and len(text) > limit:
        text = text[:limit].rstrip() + "..."
    if not text:
        return type(exc).__name__
    mark = "'" if "'" not in text or '"' in text else '"'
    return f"{type(exc).__name__}: {mark}{text}{mark}"
