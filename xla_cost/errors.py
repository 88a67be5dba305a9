"""The exceptions xla_cost raises for bad input.

Every message says what was expected, what was received, and how to fix it, on one
line, so that the CLI can print it as is and exit with code 2.
"""

from __future__ import annotations

__all__ = [
    "XlaCostError",
    "InputError",
    "CostAnalysisUnavailableError",
    "InternalError",
    "mark_own",
    "own_failure",
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


class InternalError(XlaCostError, RuntimeError):
    """A failure of xla_cost's own code (a bug to report), not of the input: one raised in the
    bookkeeping xla_cost runs inside a user's trace (`mark_own`), the user's code not at fault.

    Args:
      expected, received, fix: as `XlaCostError` takes them.
    """


_OWN = "__xla_cost_own_work__"
"""The attribute that marks an exception as raised in xla_cost's own work (`mark_own`)."""


def mark_own(exc: BaseException, what: str) -> None:
    """Marks ``exc``, escaping xla_cost's own work ``what`` (a phrase: ``tagging the modules
    nnx.merge returns``) that runs inside a user's trace, as xla_cost's, whatever it called that
    raised it (a user module's ``__hash__``): `own_failure` finds the mark where the trace's
    failure is reported. The innermost mark is kept; an exception that takes no attribute is left."""
    if getattr(exc, _OWN, None) is None:
        try:
            setattr(exc, _OWN, what)
        except (AttributeError, TypeError):  # (an exception type with __slots__)
            pass


def own_failure(exc: BaseException, during: str) -> InternalError | None:
    """The refusal of an exception `mark_own` marked, raised while xla_cost traced ``during``
    (``train_step``, ``the model``), naming xla_cost's work as the failure; None: unmarked (the
    user's own exception, or jax's)."""
    what = getattr(exc, _OWN, None)
    if what is None:
        return None
    return InternalError(
        f"xla_cost's own work while tracing {during} ({what}) to succeed", quoted(exc, limit=300),
        f"The failure is xla_cost's, not {during}'s: report it with the traceback chained to this error.",
    )


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
