"""``ikkai.contract.masking``: card numbers (13-19 digits, Luhn), whatever separates their digits, show their last
four only; other numbers stay readable. The cases are shared with the outbox sink's Java (CardNumbersTest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ikkai.contract.masking import (
    MAX_PAN_DIGITS,
    MAX_SEPARATORS,
    MIN_PAN_DIGITS,
    SEPARATORS,
    luhn_valid,
    mask_card_numbers,
    masked_prefix,
)
from tests.ikkai.contract.card_number_checks import with_check_digit

VECTORS = json.loads((Path(__file__).with_name("card_number_vectors.json")).read_text())["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_each_shared_case_masks_as_written(vector: dict[str, str]) -> None:
    assert mask_card_numbers(vector["text"]) == vector["masked"]
    assert mask_card_numbers(vector["masked"]) == vector["masked"]  # masking twice changes nothing


@st.composite
def card_numbers(draw: st.DrawFn) -> str:
    length = draw(st.integers(MIN_PAN_DIGITS, MAX_PAN_DIGITS))
    return with_check_digit(draw(st.text("0123456789", min_size=length - 1, max_size=length - 1)))


# Every Unicode space and dash (hypothesis draws from the categories, not from our list), and our own list.
SEPARATOR_CHARACTERS = st.characters(categories=("Zs", "Pd")) | st.sampled_from(SEPARATORS + "\t\n")
LETTERS = st.text("abcxyz ,:;!?()'\"", max_size=20)  # around the card: no digit, no separator next to it


@given(
    pan=card_numbers(),
    cuts=st.lists(st.integers(1, MAX_PAN_DIGITS - 1), max_size=6, unique=True),
    separators=st.lists(st.text(SEPARATOR_CHARACTERS, min_size=1, max_size=MAX_SEPARATORS), min_size=6, max_size=6),
    before=LETTERS,
    after=LETTERS,
)
def test_a_card_number_is_masked_whatever_separates_its_groups(
    pan: str, cuts: list[int], separators: list[str], before: str, after: str
) -> None:
    groups, at = [], 0
    for cut in sorted(c for c in cuts if c < len(pan)):
        groups.append(pan[at:cut])
        at = cut
    groups.append(pan[at:])
    written = groups[0] + "".join(sep + group for sep, group in zip(separators, groups[1:], strict=False))
    text = f"{before}x{written}x{after}"
    assert mask_card_numbers(text) == f"{before}x{'*' * (len(pan) - 4)}{pan[-4:]}x{after}"


@given(st.integers(10**12, 10**13 - 1).filter(lambda n: not luhn_valid(str(n))))
def test_epoch_milliseconds_that_fail_the_luhn_check_stay_readable(millis: int) -> None:
    text = f"event_time {millis} is behind the watermark"
    assert mask_card_numbers(text) == text


@pytest.mark.parametrize(
    "text",
    ["12345678901", "amount 1000000.01 EUR", "2026-01-05T10:00:00.123Z", "partition 2 of 3", "1,040,000", "12  34"],
)
def test_shorter_numbers_dates_and_amounts_are_left_as_they_are(text: str) -> None:
    assert mask_card_numbers(text) == text


def test_a_prefix_is_masked_as_the_whole_text_would_be_and_a_long_text_costs_only_its_prefix() -> None:
    spaced = "4111 - 1111 - 1111 - 1111 "  # masks to 17 characters from 26
    text = spaced * 40
    assert masked_prefix(text, 100) == mask_card_numbers(text)[:99] + "…"
    assert masked_prefix("x" * 50 + "4111111111111111", 60) == "x" * 50 + "*********…"  # the cut leaves no digit
    huge = "1 " * 500_000  # a megabyte of one-digit groups: only a prefix is read
    assert len(masked_prefix(huge, 1024)) == 1024


def test_an_error_about_a_value_is_shown_masked_and_cut() -> None:
    from ikkai.contract.masking import shown_error
    from ikkai.contract.outbox import path_problem

    shown = shown_error(TypeError("'4111111111111111' is not an integer" + "!" * 500), limit=100)
    assert (
        shown.startswith("TypeError: '************1111' is not an integer") and len(shown) <= len("TypeError: ") + 100
    )
    problem = path_problem("4111111111111111/holds")  # a path without its leading '/' is quoted in the refusal
    assert problem is not None and "4111111111111111" not in problem and "1111" in problem
    cut = path_problem("x" * 55 + "4111111111111111")  # the quote's cut falls inside the card number
    assert cut is not None and "4111" not in cut and "*********…" in cut
