"""How a card number is masked wherever text that came from outside is shown: its last four digits only.

PCI DSS requires a stored primary account number (PAN) to be unreadable and allows at most its
last four digits to be shown. Any field of a record may carry one (a sender's bug puts the card
number into a note, an id, or sends it as a JSON number), so text quoted from input into a dead
letter's reason, a log line or an error goes through ``mask_card_numbers`` first: every run of
``MIN_PAN_DIGITS`` or more digits, also when single spaces or dashes split it ("4111 1111 1111
1111"), becomes one ``*`` per digit but the last four, the same form as the event's ``card_masked``
(``transforms.payments.mask_card_number``). A run longer than a PAN is masked as well, since a
PAN may sit inside it; shorter numbers (amounts, dates, partitions) are left as they are.

Digits are matched in every script (``\\d``, not ``[0-9]``): a PAN written in fullwidth or
Arabic-Indic digits is still a card number to whoever reads it.
"""

from __future__ import annotations

import re
from typing import Final

MIN_PAN_DIGITS: Final = 12  # ISO/IEC 7812: a primary account number has 12 to 19 digits
SHOWN_DIGITS: Final = 4
_CARD_LIKE = re.compile(rf"\d(?:[ -]?\d){{{MIN_PAN_DIGITS - 1},}}")
_DIGIT = re.compile(r"\d")


def _mask(match: re.Match[str]) -> str:
    digits = _DIGIT.findall(match.group())
    return "*" * (len(digits) - SHOWN_DIGITS) + "".join(digits[-SHOWN_DIGITS:])


MAX_QUOTED_ERROR_CHARS: Final = 200  # what an error about a value may show of that value's text


def shown_error(exc: BaseException, limit: int = MAX_QUOTED_ERROR_CHARS) -> str:
    """``TypeError: <its text>`` for a message about a record's values: card numbers masked, then cut to ``limit``.

    fastavro's and the column encoder's errors quote the value that did not fit (``'4111…' is not an
    integer``); whatever shows such an error (a dead letter's reason, a log line) shows this instead.
    """
    text = mask_card_numbers(str(exc))
    return f"{type(exc).__name__}: {text if len(text) <= limit else text[: limit - 1] + '…'}"


def mask_card_numbers(text: str) -> str:
    """``text`` with every card-number-like run of digits masked to its last four: see the module docstring.

    >>> mask_card_numbers('card_number is 4111111111111111, not a string')
    'card_number is ************1111, not a string'
    >>> mask_card_numbers('"4111-1111-1111-1111" on 2026-01-05, 12.34 EUR')
    '"************1111" on 2026-01-05, 12.34 EUR'
    """
    return _CARD_LIKE.sub(_mask, text)
