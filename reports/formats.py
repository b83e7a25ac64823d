"""The report formats gpuledger writes, checked where they are named (the command line, the
settings) without loading what renders them."""

from __future__ import annotations

from gpuledger_errors import InputError

FORMATS = ("csv", "xlsx", "html", "pdf", "focus")


class FormatError(InputError):
    """A format that is not one gpuledger writes."""


def formats(text: str) -> tuple[str, ...]:
    """``csv,xlsx`` as a tuple, each checked."""
    asked = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    wrong = [f for f in asked if f not in FORMATS]
    if wrong or not asked:
        raise FormatError(
            f"--formats {text!r}: {', '.join(wrong) or 'none given'} is not a report format; "
            f"use some of {','.join(FORMATS)}"
        )
    return tuple(dict.fromkeys(asked))
