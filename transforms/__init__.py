"""Data-engineer transforms: small, pure, deterministic DataFrame -> DataFrame steps, registered by name.

Built by the enrich-and-transforms issue (#5); empty until then.
"""
