"""The payments transforms, each on its own edge cases (their examples are checked in test_check.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from tests.cli.cli_runner import ROOT
from transforms import CURRENCY_EXPONENTS, TransformSpecError, registered
from transforms.payments import (
    MERCHANT_CATEGORIES,
    amount_to_minor_units,
    mask_card_number,
    merchant_category,
    normalize_country,
)


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        ("0.01", "USD", 1),
        ("-12.50", "GBP", -1250),
        (" 7.1 ", "EUR", 710),  # spaces trimmed, missing digits padded
        ("00012.3400", "EUR", 1234),
        ("3.141", "BHD", 3141),
        ("3", "KWD", 3000),
        ("92233720368547758.07", "EUR", 9223372036854775807),  # Long.MAX_VALUE, exactly
        ("92233720368547758.08", "EUR", None),  # one cent more does not fit a long: null, not a wrap or an error
        ("0.10000000000000001", "EUR", None),  # a float would round this to 10
        ("1e3", "EUR", None),
        ("12,34", "EUR", None),
        (".5", "EUR", None),
        ("5.", "EUR", None),
        ("", "EUR", None),
        ("1.00", None, None),
        ("1.00", "eur", None),  # codes are upper case; enrich validates them before this step
    ],
)
def test_amount_to_minor_units_is_exact_or_null(spark: Any, amount: str, currency: str, minor: int | None) -> None:
    df = spark.createDataFrame([(amount, currency)], "amount string, currency string")
    out = amount_to_minor_units(df, amount="amount", currency="currency", output="amount_minor")
    assert out.schema["amount_minor"].dataType.simpleString() == "bigint"
    assert out.collect()[0]["amount_minor"] == minor


def test_every_currency_in_the_table_converts_by_its_exponent(spark: Any) -> None:
    df = spark.createDataFrame([("1", code) for code in CURRENCY_EXPONENTS], "a string, c string")
    out = amount_to_minor_units(df, amount="a", currency="c", output="m")
    assert {row["c"]: row["m"] for row in out.collect()} == {c: 10**e for c, e in CURRENCY_EXPONENTS.items()}


def test_mask_card_number_keeps_only_the_last_four_digits(spark: Any) -> None:
    df = spark.createDataFrame(
        [("p1", "4111-1111-1111-1111"), ("p2", "6011000990139424000"), ("p3", "4111 1111 111"), ("p4", "")],
        "payment_id string, card_number string",
    )
    expected = spark.createDataFrame(
        [("p1", "************1111"), ("p2", "***************4000"), ("p3", "***********"), ("p4", "")],
        "payment_id string, card_number string",
    )
    assertDataFrameEqual(mask_card_number(df, column="card_number"), expected)


def test_no_pan_digits_survive_masking(spark: Any) -> None:
    pans = ["4111111111111111", "5500 0000 0000 0004", "3400-000000-00009", "1234567890"]
    df = spark.createDataFrame([(pan,) for pan in pans], "card_number string")
    for pan, row in zip(pans, mask_card_number(df, column="card_number").collect(), strict=True):
        visible = re.sub(r"\*", "", row["card_number"])
        digits = re.sub(r"[^0-9]", "", pan)
        assert visible == (digits[-4:] if len(digits) >= 12 else "")


def test_merchant_category_reads_the_shipped_iso_18245_table(spark: Any) -> None:
    assert len(MERCHANT_CATEGORIES) >= 100
    assert all(re.fullmatch(r"[0-9]{4}", code) for code in MERCHANT_CATEGORIES)
    assert MERCHANT_CATEGORIES["5411"] == "Grocery Stores and Supermarkets"
    df = spark.createDataFrame([("m1", "6011"), ("m2", "742"), ("m3", "5999")], "merchant_id string, mcc string")
    expected = spark.createDataFrame(
        [
            ("m1", "6011", "Financial Institutions - Automated Cash Disbursements"),
            ("m2", "742", "unknown"),  # leading zeros count: 0742 is a veterinarian, 742 is nothing
            ("m3", "5999", "Miscellaneous and Specialty Retail Stores"),
        ],
        "merchant_id string, mcc string, category string",
    )
    assertDataFrameEqual(merchant_category(df, code_column="mcc", output="category"), expected)


def test_normalize_country_upper_cases_two_letter_codes_only(spark: Any) -> None:
    df = spark.createDataFrame([("fr",), ("U S",), ("D1",)], "country string")
    expected = spark.createDataFrame([("FR",), (None,), (None,)], "country string")
    assertDataFrameEqual(normalize_country(df, column="country"), expected)


def test_a_registered_transform_called_directly_checks_its_columns(spark: Any) -> None:
    df = spark.createDataFrame([("4111111111111111",)], "pan string")
    assert registered()["mask_card_number"](df, column="pan").collect()[0]["pan"] == "************1111"
    with pytest.raises(
        TransformSpecError, match="input column 'card_number' \\(parameter column\\) is not in the DataFrame"
    ):
        registered()["mask_card_number"](df, column="card_number")


def test_the_merchant_table_loads_when_the_package_runs_from_a_zip(tmp_path: Path) -> None:
    """`ikkai jobs submit` ships the packages as a zip; the CSV must be read from inside it."""
    archive = tmp_path / "app.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for package in ("transforms", "ikkai"):
            for path in sorted((ROOT / package).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    zipped.write(path, path.relative_to(ROOT).as_posix())
    code = "import transforms.payments as p; print(p.__file__, p.MERCHANT_CATEGORIES['0742'])"
    result = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(archive)!r}); {code}"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.stdout.split() == [f"{archive}/transforms/payments.py", "Veterinary", "Services"], result.stderr
