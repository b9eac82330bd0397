"""``ikkai.contract.masking``: card-number-like digits in text show their last four only."""

from __future__ import annotations

import pytest

from ikkai.contract.masking import mask_card_numbers


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("card_number is 4111111111111111, not a string", "card_number is ************1111, not a string"),
        ("123456789012", "********9012"),  # 12 digits: the shortest PAN
        ("4111 1111 1111 1111 and 4111-1111-1111-1111", "************1111 and ************1111"),
        ("1" * 25, "*" * 21 + "1111"),  # longer than a PAN: one may sit inside it
        ("１２３４５６７８９０１２", "********９０１２"),  # fullwidth digits are digits to a reader
        ("b'5500000000000004'", "b'************0004'"),
    ],
)
def test_card_like_runs_keep_only_their_last_four_digits(text: str, masked: str) -> None:
    assert mask_card_numbers(text) == masked


@pytest.mark.parametrize(
    "text",
    ["12345678901", "amount 1000000.01 EUR", "2026-01-05T10:00:00.123Z", "partition 2 of 3", "1,040,000", "12  34"],
)
def test_shorter_numbers_dates_and_amounts_are_left_as_they_are(text: str) -> None:
    assert mask_card_numbers(text) == text


def test_an_error_about_a_value_is_shown_masked_and_cut() -> None:
    from ikkai.contract.masking import shown_error
    from ikkai.contract.outbox import path_problem

    shown = shown_error(TypeError("'4111111111111111' is not an integer" + "!" * 500), limit=100)
    assert (
        shown.startswith("TypeError: '************1111' is not an integer") and len(shown) <= len("TypeError: ") + 100
    )
    problem = path_problem("4111111111111111/holds")  # a path without its leading '/' is quoted in the refusal
    assert problem is not None and "4111111111111111" not in problem and "1111" in problem
