"""The transforms the payments pipeline uses: minor units, card masking, merchant category, country codes.

Each is built from Spark's own column functions (no Python UDF), so it runs in the JVM, is
deterministic and keeps the row's partition. Lookup tables are literal maps in the plan, not
joins, so a transform never reshuffles the stream.
"""

from __future__ import annotations

import csv
import io
import re
from importlib import resources
from types import MappingProxyType

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from transforms.currencies import CURRENCY_EXPONENTS
from transforms.registry import Example, InputColumn, OutputColumn, register

MERCHANT_CATEGORIES_FILE = "merchant_categories.csv"
UNKNOWN_CATEGORY = "unknown"
MIN_PAN_DIGITS = 12  # ISO/IEC 7812: a primary account number has 12 to 19 digits
_AMOUNT = r"^(-?)([0-9]+)(?:\.([0-9]+))?$"


def _merchant_categories() -> MappingProxyType[str, str]:
    # importlib.resources, not open(): the package may run from the application zip of `ikkai jobs submit`
    text = resources.files("transforms").joinpath(MERCHANT_CATEGORIES_FILE).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    table = {row["mcc"]: row["description"] for row in rows}
    bad = [code for code in table if not re.fullmatch(r"[0-9]{4}", code)]
    if bad or len(table) != len(rows):
        raise ValueError(f"transforms/{MERCHANT_CATEGORIES_FILE}: codes must be 4 digits and unique: {bad or rows}")
    return MappingProxyType(table)


MERCHANT_CATEGORIES = _merchant_categories()
"""ISO 18245 merchant category code (4 digits, a string: "0742") -> its description. A subset."""


def _lookup(table: MappingProxyType[str, str] | MappingProxyType[str, int], key: Column) -> Column:
    pairs = [F.lit(value) for item in sorted(table.items()) for value in item]
    return F.create_map(*pairs)[key]


@register(
    examples=[
        Example(
            params={"amount": "amount", "currency": "currency", "output": "amount_minor"},
            schema="amount string, currency string",
            rows=[
                {"amount": "12.34", "currency": "EUR"},
                {"amount": "1500", "currency": "JPY"},
                {"amount": "1.005", "currency": "KWD"},
                {"amount": "12.340", "currency": "EUR"},
                {"amount": "12.345", "currency": "EUR"},
                {"amount": "1.5", "currency": "JPY"},
                {"amount": "1.00", "currency": "XYZ"},
                {"amount": "abc", "currency": "USD"},
                {"amount": None, "currency": "USD"},
            ],
            expected=[
                {"amount": "12.34", "currency": "EUR", "amount_minor": 1234},
                {"amount": "1500", "currency": "JPY", "amount_minor": 1500},
                {"amount": "1.005", "currency": "KWD", "amount_minor": 1005},
                {"amount": "12.340", "currency": "EUR", "amount_minor": 1234},
                {"amount": "12.345", "currency": "EUR", "amount_minor": None},
                {"amount": "1.5", "currency": "JPY", "amount_minor": None},
                {"amount": "1.00", "currency": "XYZ", "amount_minor": None},
                {"amount": "abc", "currency": "USD", "amount_minor": None},
                {"amount": None, "currency": "USD", "amount_minor": None},
            ],
        )
    ]
)
def amount_to_minor_units(
    df: DataFrame, *, amount: InputColumn, currency: InputColumn, output: OutputColumn
) -> DataFrame:
    """Decimal-string amount -> whole minor units (long) by the currency's ISO 4217 exponent.

    "12.34" EUR -> 1234, "1500" JPY -> 1500, "1.005" KWD -> 1005. Exact: the digits are shifted
    as text, never through a float. ``amount`` is ``-?digits(.digits)?`` after trimming spaces;
    trailing zeros are fine ("12.340" EUR -> 1234).

    The output is null (never rounded) when the amount is not a whole number of minor units
    ("12.345" EUR, "1.5" JPY), is not a plain decimal ("abc", "1e3", "12,34"), is null, does not
    fit a long, or the currency is not in ``CURRENCY_EXPONENTS``. A null output tells the caller
    to route the record to the DLQ: money is never silently rounded.
    """
    text = F.trim(F.col(amount))
    exponent = _lookup(CURRENCY_EXPONENTS, F.col(currency))
    fraction = F.regexp_replace(F.regexp_extract(text, _AMOUNT, 3), "0+$", "")
    magnitude = F.concat(F.regexp_extract(text, _AMOUNT, 2), F.rpad(fraction, exponent, F.lit("0"))).try_cast("long")
    signed = F.when(F.regexp_extract(text, _AMOUNT, 1) == "-", -magnitude).otherwise(magnitude)
    exact = text.rlike(_AMOUNT) & exponent.isNotNull() & (F.length(fraction) <= exponent)
    return df.withColumn(output, F.when(exact, signed).cast("long"))


@register(
    examples=[
        Example(
            params={"column": "card_number"},
            schema="payment_id string, card_number string",
            rows=[
                {"payment_id": "p1", "card_number": "4111111111111111"},
                {"payment_id": "p2", "card_number": "4111 1111 1111 1234"},
                {"payment_id": "p3", "card_number": "378282246310005"},
                {"payment_id": "p4", "card_number": "12345"},
                {"payment_id": "p5", "card_number": None},
            ],
            expected=[
                {"payment_id": "p1", "card_number": "************1111"},
                {"payment_id": "p2", "card_number": "************1234"},
                {"payment_id": "p3", "card_number": "***********0005"},
                {"payment_id": "p4", "card_number": "*****"},
                {"payment_id": "p5", "card_number": None},
            ],
        )
    ]
)
def mask_card_number(df: DataFrame, *, column: InputColumn) -> DataFrame:
    """Replace a card number (PAN) in place with its last 4 digits behind one ``*`` per other digit.

    "4111 1111 1111 1111" -> "************1111". Spaces, dashes and any other non-digits are
    dropped first. A value with fewer than 12 digits is not a PAN and is masked entirely
    ("12345" -> "*****"), so a typo or a truncated number never leaks its digits; null stays null.
    The column is overwritten: the PAN never reaches an event.
    """
    digits = F.regexp_replace(F.col(column), "[^0-9]", "")
    count = F.length(digits)
    masked = F.when(
        count >= MIN_PAN_DIGITS, F.concat(F.repeat(F.lit("*"), count - 4), F.substring(digits, -4, 4))
    ).otherwise(F.repeat(F.lit("*"), count))
    return df.withColumn(column, masked)


@register(
    examples=[
        Example(
            params={"code_column": "merchant_category_code", "output": "merchant_category"},
            schema="merchant_category_code string",
            rows=[
                {"merchant_category_code": "5411"},
                {"merchant_category_code": " 5812 "},
                {"merchant_category_code": "0742"},
                {"merchant_category_code": "0000"},
                {"merchant_category_code": None},
            ],
            expected=[
                {"merchant_category_code": "5411", "merchant_category": "Grocery Stores and Supermarkets"},
                {"merchant_category_code": " 5812 ", "merchant_category": "Eating Places and Restaurants"},
                {"merchant_category_code": "0742", "merchant_category": "Veterinary Services"},
                {"merchant_category_code": "0000", "merchant_category": "unknown"},
                {"merchant_category_code": None, "merchant_category": "unknown"},
            ],
        )
    ]
)
def merchant_category(df: DataFrame, *, code_column: InputColumn, output: OutputColumn) -> DataFrame:
    """ISO 18245 merchant category code -> its description, from transforms/merchant_categories.csv.

    "5411" -> "Grocery Stores and Supermarkets". The code is a 4-digit string (leading zeros
    count: "0742"); surrounding spaces are ignored. A code not in the table, or null, gives
    "unknown", never null, so downstream features always have a value.
    """
    category = _lookup(MERCHANT_CATEGORIES, F.trim(F.col(code_column)))
    return df.withColumn(output, F.coalesce(category, F.lit(UNKNOWN_CATEGORY)))


@register(
    examples=[
        Example(
            params={"column": "country"},
            schema="country string",
            rows=[
                {"country": " de "},
                {"country": "US"},
                {"country": "Deutschland"},
                {"country": ""},
                {"country": None},
            ],
            expected=[{"country": "DE"}, {"country": "US"}, {"country": None}, {"country": None}, {"country": None}],
        )
    ]
)
def normalize_country(df: DataFrame, *, column: InputColumn) -> DataFrame:
    """ISO 3166-1 alpha-2 country code in place: trimmed and upper-cased (" de " -> "DE").

    Anything that is not two letters afterwards ("Deutschland", "", null) becomes null; whether
    the code is assigned is not checked.
    """
    code = F.upper(F.trim(F.col(column)))
    return df.withColumn(column, F.when(code.rlike("^[A-Z]{2}$"), code))
