"""ISO 4217 currencies and their minor-unit exponents (how many decimals one minor unit is).

Active circulating currencies as of ISO 4217's 2025 list. Left out on purpose: fund codes (BOV, CHE,
CHW, CLF, COU, MXV, USN, UYI, UYW), precious metals and special units (XAU, XAG, XPD, XPT, XDR,
XSU, XUA, XBA-XBD, XTS, XXX) and withdrawn codes: no payment is made in them. The enrich job
treats a currency that is not here as unknown (DLQ), so this table is the one place to add one.
"""

from __future__ import annotations

from types import MappingProxyType

_EXPONENT_0 = "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF"
_EXPONENT_3 = "BHD IQD JOD KWD LYD OMR TND"
_EXPONENT_2 = (
    "AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BRL BSD BTN BWP BYN BZD CAD CDF CHF CNY "
    "COP CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR "
    "ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK "
    "MXN MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP "
    "SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD UYU UZS VED VES WST XCD XCG YER "
    "ZAR ZMW ZWG"
)

CURRENCY_EXPONENTS: MappingProxyType[str, int] = MappingProxyType(
    dict(
        sorted(
            [(code, 0) for code in _EXPONENT_0.split()]
            + [(code, 2) for code in _EXPONENT_2.split()]
            + [(code, 3) for code in _EXPONENT_3.split()]
        )
    )
)
"""ISO 4217 alphabetic code -> minor-unit exponent: JPY 0, EUR 2, KWD 3. Read-only."""
