"""Master-data profile versions: keys, encoding and the seeded generator (pure: no stack)."""

from __future__ import annotations

from demo.payments_simulation import generate_profiles, simulate
from spark_jobs.enrich.master_data import (
    CustomerProfile,
    MerchantProfile,
    decode_profile,
    encode_profile,
)


def test_each_distinct_version_has_its_own_key_and_a_republish_the_same() -> None:
    v1 = MerchantProfile("m-001", 100, "Shop", "DE", "low")
    corrected = MerchantProfile("m-001", 100, "Shop", "DE", "high")
    assert encode_profile(v1) == encode_profile(v1)
    assert encode_profile(v1)[0] != encode_profile(corrected)[0]
    assert encode_profile(v1)[0].startswith(b"m-001@100@")


def test_profiles_round_trip_through_avro() -> None:
    customer = CustomerProfile("cust-00001", 5, "premium", "JP")
    assert decode_profile("customer_profile", encode_profile(customer)[1]) == {
        "customer_id": "cust-00001", "valid_from": 5, "segment": "premium", "home_country": "JP",
    }  # fmt: skip


def test_generated_versions_cover_the_world() -> None:
    world = simulate(5, payments=200)
    merchants, customers = generate_profiles(world, 5)
    assert {p.merchant_id for p in merchants} >= set(world.payments["merchant_id"])
    assert {p.customer_id for p in customers} >= set(world.payments["customer_id"])
    assert len(merchants) > 50 and len(customers) > world.snapshots["customer_id"].nunique()  # some have two versions
    assert generate_profiles(world, 5) == (merchants, customers)
