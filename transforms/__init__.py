"""Data-engineer transforms: small, pure, deterministic DataFrame -> DataFrame steps, registered by name.

    from transforms import load_spec
    pipeline = load_spec("spark_jobs/enrich/transforms.yaml")  # unknown names, bad params fail here
    events = pipeline.apply(parsed)                             # missing input columns fail here

A transform is a function registered with ``@register(examples=[...])``; docs/adding-a-transform.md
walks through adding one. ``ikkai transforms list`` shows them, ``ikkai transforms check`` proves
each deterministic and true to its examples.
"""

from transforms.check import CheckResult, check_transforms
from transforms.currencies import CURRENCY_EXPONENTS
from transforms.errors import TransformDefinitionError, TransformSpecError
from transforms.registry import Example, InputColumn, OutputColumn, Param, Transform, define, register, registered
from transforms.spec import TransformPipeline, TransformStep, load_spec, parse_spec

__all__ = [
    "CURRENCY_EXPONENTS",
    "CheckResult",
    "Example",
    "InputColumn",
    "OutputColumn",
    "Param",
    "Transform",
    "TransformDefinitionError",
    "TransformPipeline",
    "TransformSpecError",
    "TransformStep",
    "check_transforms",
    "define",
    "load_spec",
    "parse_spec",
    "register",
    "registered",
]
