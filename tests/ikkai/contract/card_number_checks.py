"""An independent reading of "this text shows a card number", for the tests of what quotes input.

A run of digits joined by single spaces or dashes (a card's usual shapes) is a card number when it holds
13 to 19 digits and passes the Luhn check, or when one unbroken group of it is longer than a PAN. Written
apart from ``ikkai.contract.masking`` (which also reads other separators) so that a test does not check the
rule with itself.
"""

from __future__ import annotations

import re

RUN = re.compile(r"\d(?:[ -]?\d)*")


def _luhn(digits: str) -> bool:
    doubled = [int(d) * 2 for d in digits[-2::-2]]
    return (sum(int(d) for d in digits[::-2]) + sum(d - 9 if d > 9 else d for d in doubled)) % 10 == 0


def card_numbers_in(text: str) -> set[str]:
    """The digits of every card number ``text`` shows (see the module docstring)."""
    found = set()
    for run in RUN.findall(text):
        digits = "".join(c for c in run if c.isdigit())
        if (13 <= len(digits) <= 19 and _luhn(digits)) or any(len(g) > 19 for g in re.findall(r"\d+", run)):
            found.add(digits)
    return found


def with_check_digit(body: str) -> str:
    """``body`` and the digit that makes it pass the Luhn check: a card number, from any digits."""
    return next(body + d for d in "0123456789" if _luhn(body + d))
