"""Generated payments world: customers, their feature snapshots over time, and payment events.

Deterministic for a seed: the training script, the tests and the benchmark all draw from it.
Fraud labels follow hidden rules (big amounts relative to the customer's habit, abroad, card
not present, at night, past chargebacks), so a model can learn them and be checked on them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pandas as pd

from spark_jobs.enrich.master_data import RISK_TIERS, SEGMENTS, CustomerProfile, MerchantProfile

DAY_MS = 86_400_000
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the first snapshot
COUNTRIES = ("DE", "FR", "JP", "US", "GB")
CURRENCY = {"DE": "EUR", "FR": "EUR", "JP": "JPY", "US": "USD", "GB": "GBP"}
SNAPSHOT_COLUMNS = (
    "customer_id", "valid_from", "home_country", "avg_amount_30d", "txn_count_30d", "chargebacks_365d",
    "account_age_days",
)  # fmt: skip


@dataclass(frozen=True)
class PaymentsWorld:
    snapshots: pd.DataFrame  # SNAPSHOT_COLUMNS, one row per (customer, weekly snapshot)
    payments: pd.DataFrame  # payment_event fields, plus is_fraud (the hidden truth)


def simulate(seed: int, *, customers: int = 400, payments: int = 2000, weeks: int = 4) -> PaymentsWorld:
    rng = np.random.default_rng(seed)
    ids = [f"cust-{i:05d}" for i in range(customers)]
    home = rng.choice(COUNTRIES, customers)
    habit = rng.lognormal(8.0, 0.8, customers)  # typical amount in minor units
    age0 = rng.integers(1, 2000, customers)
    rows = []
    for week in range(weeks):
        drift = rng.lognormal(0.0, 0.15, customers)
        counts = rng.poisson(12, customers)
        chargebacks = rng.poisson(0.15 + 0.05 * week, customers)
        for c in range(customers):
            rows.append((
                ids[c], START_MS + week * 7 * DAY_MS, str(home[c]), float(round(habit[c] * drift[c], 2)),
                float(counts[c]), float(chargebacks[c]), float(age0[c] + 7 * week),
            ))  # fmt: skip
    snapshots = pd.DataFrame(rows, columns=list(SNAPSHOT_COLUMNS))

    who = rng.integers(0, customers, payments)
    event_time = START_MS - DAY_MS + rng.integers(0, (weeks * 7 + 1) * DAY_MS, payments)
    abroad = rng.random(payments) < 0.15
    country = np.where(abroad, rng.choice(COUNTRIES, payments), home[who])
    spike = rng.random(payments) < 0.1
    amount = np.maximum(100, habit[who] * rng.lognormal(0.0, 0.4, payments) * np.where(spike, 8.0, 1.0)).astype(int)
    card_present = rng.random(payments) < 0.6
    hour = (event_time // 3_600_000) % 24
    logit = (
        -4.2 + 2.2 * spike + 1.6 * (country != home[who]) + 1.2 * ~card_present + 1.0 * (hour < 5)
        + 0.8 * rng.poisson(0.2, payments)
    )  # fmt: skip
    is_fraud = rng.random(payments) < 1 / (1 + np.exp(-logit))
    frame = pd.DataFrame({
        "event_id": [f"evt-{seed}-{i:07d}" for i in range(payments)],
        "payment_id": [f"pay-{seed}-{i:07d}" for i in range(payments)],
        "customer_id": [ids[c] for c in who],
        "merchant_id": [f"m-{m:03d}" for m in rng.integers(0, 50, payments)],
        "amount_minor": amount.astype("int64"),
        "currency": [CURRENCY[str(c)] for c in country],
        "country": country.astype(str),
        "card_present": card_present,
        "event_time": event_time.astype("int64"),
        "is_fraud": is_fraud,
    })  # fmt: skip
    return PaymentsWorld(snapshots, frame)


def payment_records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """Rows as payment_event records (plain Python types, no hidden truth)."""
    columns = [c for c in frame.columns if c != "is_fraud"]
    return [
        {c: (v.item() if isinstance(v, np.generic) else v) for c, v in zip(columns, row, strict=True)}
        for row in frame[columns].itertuples(index=False, name=None)
    ]


def generate_profiles(
    world: PaymentsWorld, seed: int, *, merchants: int = 50, changes: float = 0.3
) -> tuple[list[MerchantProfile], list[CustomerProfile]]:
    """Profile versions for the world's merchants (``m-000``…) and customers, seeded.

    Every entity has a first version valid from 30 days before the world starts; a share
    (``changes``) gets a second version valid from a day inside the world's four weeks (a new
    risk tier, a segment change), so as-of joins pick different versions for different events.
    """
    rng = random.Random(seed)  # noqa: S311 - test data
    base = START_MS - 30 * DAY_MS
    countries = ("DE", "FR", "JP", "US", "GB")
    merchant_rows: list[MerchantProfile] = []
    for m in range(merchants):
        mid = f"m-{m:03d}"
        first = MerchantProfile(mid, base, f"Merchant {m:03d}", rng.choice(countries), rng.choice(RISK_TIERS))
        merchant_rows.append(first)
        if rng.random() < changes:
            tier = rng.choice([t for t in RISK_TIERS if t != first.risk_tier])
            merchant_rows.append(MerchantProfile(mid, START_MS + rng.randrange(0, 28) * DAY_MS, first.name,
                                                 first.country, tier))  # fmt: skip
    homes = world.snapshots.drop_duplicates("customer_id").set_index("customer_id")["home_country"]
    customer_rows: list[CustomerProfile] = []
    for cid, home in sorted(homes.items()):
        first_c = CustomerProfile(str(cid), base, rng.choice(SEGMENTS), str(home))
        customer_rows.append(first_c)
        if rng.random() < changes:
            segment = rng.choice([s for s in SEGMENTS if s != first_c.segment])
            customer_rows.append(CustomerProfile(str(cid), START_MS + rng.randrange(0, 28) * DAY_MS, segment,
                                                 str(home)))  # fmt: skip
    return merchant_rows, customer_rows
