"""How a card number is masked wherever text that came from outside is shown: its last four digits only.

PCI DSS requires a stored primary account number (PAN) to be unreadable and allows at most its
last four digits to be shown. Any field of a record may carry one (a sender's bug puts the card
number into a note, an id, or sends it as a JSON number), so text quoted from input into a dead
letter's reason, a log line or an error goes through ``mask_card_numbers`` first.

What is a card number, whatever separates its digits:

- a *run* is digits joined by separators: at most ``MAX_SEPARATORS`` in a row of white space of any
  kind (no-break, thin, narrow, ideographic spaces too), invisible format characters (zero-width space,
  word joiner, soft hyphen), dashes of any kind (hyphen, en and em dash, minus sign, fullwidth and small
  forms), dots (full stop, middle dot, bullet, one-dot leader, fullwidth), slashes (solidus, fraction and
  division slash, backslash, fullwidth) and underscores. Commas and colons are not separators: they join
  amounts and times, never a card's groups;
- a *group* is digits with nothing between them; a card number is consecutive whole groups of a run
  holding ``MIN_PAN_DIGITS`` to ``MAX_PAN_DIGITS`` digits that pass the Luhn check (the check digit every
  payment card carries), so "4111 1111 1111 1111" is one, and so is a 16-digit PAN glued to nothing;
- a group longer than ``MAX_PAN_DIGITS`` is masked whole: a PAN may sit inside it, and it is no readable
  number anyway.

Each card number (overlapping ones merged) becomes one ``*`` per digit but the last four, its separators
dropped: the same form as the event's ``card_masked`` (``transforms.payments.mask_card_number``). Other
numbers stay readable: epoch milliseconds (13 digits, 9 in 10 fail the Luhn check; enrich's reasons name
times in ISO-8601 anyway), offsets, amounts, dates. A 13-19 digit number that passes Luhn by chance is
masked: a false alarm is the safe side. The rule is linear in the text's length, but costs up to
``MAX_PAN_DIGITS`` steps per group of digits: whatever shows only a prefix of a long text (a reason, an error)
masks only that prefix (``masked_prefix``). The outbox sink's Java
applies the same rule (``dev.ikkai.outbox.CardNumbers``; the shared cases are
``tests/ikkai/contract/card_number_vectors.json``).

Digits are matched in every script (``\\d``, not ``[0-9]``): a PAN written in fullwidth or
Arabic-Indic digits is still a card number to whoever reads it.
"""

from __future__ import annotations

import re
from typing import Final

MIN_PAN_DIGITS: Final = 13  # the shortest payment card number in use (13-digit Visa)
MAX_PAN_DIGITS: Final = 19  # ISO/IEC 7812
SHOWN_DIGITS: Final = 4
MAX_SEPARATORS: Final = 3  # "4111 - 1111": a space, a dash and a space between two groups
# Separators besides white space (\s): format characters, every dash (Unicode's Pd, the minus sign), dots, slashes.
SEPARATORS: Final = (
    "\u00ad\u200b\u200c\u200d\u2060\ufeff"  # soft hyphen, zero-width space/non-joiner/joiner, word joiner, BOM
    "-\u058a\u05be\u1400\u1806\u2010\u2011\u2012\u2013\u2014\u2015\u2e17\u2e1a\u2e3a\u2e3b\u2e40\u2e5d\u301c\u3030\u30a0"
    "\ufe31\ufe32\ufe58\ufe63\uff0d\U00010ead\u2212\u2043"  # the dashes (Pd), minus sign, hyphen bullet
    ".\u00b7\u2022\u2024\u2027\u2219\u22c5\u30fb\uff0e\uff65\u3002\ufe52"  # dots
    "/\\\u2044\u2215\u29f8\uff0f\uff3c_"  # slashes and the underscore
)
_SEPARATOR = rf"[\s{re.escape(SEPARATORS)}]"
_RUN = re.compile(rf"\d+(?:{_SEPARATOR}{{1,{MAX_SEPARATORS}}}\d+)*")
_GROUP = re.compile(r"\d+")


def luhn_valid(digits: str) -> bool:
    """The Luhn check: from the right, every second digit doubled (minus 9 when over 9); the sum ends in 0."""
    return _luhn_sum(digits, 0) % 10 == 0


def _luhn_sum(digits: str, right_of: int) -> int:
    """The Luhn sum of ``digits`` when ``right_of`` digits follow them (they decide which ones are doubled)."""
    total = 0
    for i, digit in enumerate(reversed(digits), start=right_of):
        value = int(digit) * (2 if i % 2 else 1)
        total += value - 9 if value > 9 else value
    return total


def _card_spans(groups: list[re.Match[str]]) -> list[tuple[int, int]]:
    """(first, last) group indices of each card number among a run's groups, overlapping ones merged.

    Windows are grown leftwards from each last group, so each one's Luhn sum is the previous one's plus the
    new group's: at most ``MAX_PAN_DIGITS`` digits are summed per group, and the rule stays linear."""
    spans: list[tuple[int, int]] = []
    for last in range(len(groups)):
        total = count = 0
        for first in range(last, -1, -1):
            digits = groups[first].group()
            if count + len(digits) > MAX_PAN_DIGITS:
                if first == last:  # one group longer than a PAN: masked whole
                    spans.append((first, last))
                break
            total += _luhn_sum(digits, count)
            count += len(digits)
            if count >= MIN_PAN_DIGITS and total % 10 == 0:
                spans.append((first, last))
    merged: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return merged


def _masked_run(run: re.Match[str]) -> str:
    text = run.group()
    groups = list(_GROUP.finditer(text))
    if sum(len(g.group()) for g in groups) < MIN_PAN_DIGITS and all(len(g.group()) <= MAX_PAN_DIGITS for g in groups):
        return text
    out, at = [], 0
    for first, last in _card_spans(groups):
        digits = "".join(g.group() for g in groups[first : last + 1])
        out += [text[at : groups[first].start()], "*" * (len(digits) - SHOWN_DIGITS), digits[-SHOWN_DIGITS:]]
        at = groups[last].end()
    out.append(text[at:])
    return "".join(out)


MAX_QUOTED_ERROR_CHARS: Final = 200  # what an error about a value may show of that value's text


def shown_error(exc: BaseException, limit: int = MAX_QUOTED_ERROR_CHARS) -> str:
    """``TypeError: <its text>`` for a message about a record's values: card numbers masked, then cut to ``limit``.

    fastavro's and the column encoder's errors quote the value that did not fit (``'4111…' is not an
    integer``); whatever shows such an error (a dead letter's reason, a log line) shows this instead.
    """
    return f"{type(exc).__name__}: {masked_prefix(str(exc), limit)}"


def mask_card_numbers(text: str) -> str:
    """``text`` with every card number masked to its last four digits: see the module docstring.

    >>> mask_card_numbers('card_number is 4111111111111111, not a string')
    'card_number is ************1111, not a string'
    >>> mask_card_numbers('"4111\u00a01111\u20131111.1111" on 2026-01-05, 12.34 EUR, at 1795884189782')
    '"************1111" on 2026-01-05, 12.34 EUR, at 1795884189782'
    """
    return _RUN.sub(_masked_run, text)


# The most characters one card number spans: its digits, and the most separators between each two.
_LONGEST_CARD_CHARS: Final = MAX_PAN_DIGITS + (MAX_PAN_DIGITS - 1) * MAX_SEPARATORS


def masked_prefix(text: str, limit: int) -> str:
    """``text`` masked and cut to at most ``limit`` characters (the last one ``…`` when cut), reading only a prefix.

    Masking shortens a card at most ``_LONGEST_CARD_CHARS / MAX_PAN_DIGITS`` (< 4) times, so what the first
    ``limit`` characters of the masked text show comes from the first ``4 * limit`` of ``text``; a card that
    starts there ends within ``_LONGEST_CARD_CHARS`` more. Masking that much is masking the whole text, as far as
    the result shows: a cut never leaves a card number's first digits, and a megabyte of digits costs no more
    than ``limit`` of them.
    """
    shown = mask_card_numbers(text[: 4 * limit + 2 * _LONGEST_CARD_CHARS])
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
