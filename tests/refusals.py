"""The check every CLI refusal test makes: ``xla-cost ARGV`` run in-process exits 2,
prints nothing on stdout and one line on stderr saying what was expected, what came
and how to fix it ("Expected X, got Y instead. FIX"), naming every given word."""

from __future__ import annotations

from collections.abc import Sequence

from xla_cost.cli import main


def one_line_refusal(capsys, argv: Sequence[str], words: str | Sequence[str] = ()) -> str:
    """The refusal's line, without the ``xla-cost: error: `` prefix."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "", err
    assert len(lines) == 1 and lines[0].startswith("xla-cost: error: Expected "), err
    expected, _, rest = lines[0].partition(", got ")
    received, _, fix = rest.rpartition(" instead. ")
    assert expected and received and fix, lines[0]  # what was expected, what came, how to fix it
    for word in (words,) if isinstance(words, str) else words:
        assert word in lines[0], lines[0]
    return lines[0].removeprefix("xla-cost: error: ")
