"""Errors of connector bundles: a manifest, a values file or a template that cannot be used."""

from __future__ import annotations

from ikkai.errors import IkkaiError


class BundleError(IkkaiError):
    """Something in a bundle folder is wrong. ``file`` is relative to the bundle; ``line`` when known.

    Renders as ``bundle payments-ingest templates/source.json.j2 line 12: undefined variable
    'db_host': define it in values/dev.yaml``.
    """

    def __init__(self, bundle: str, file: str, problem: str, *, line: int | None = None, fix: str | None = None):
        where = f" line {line}" if line else ""
        super().__init__(f"bundle {bundle} {file}{where}: {problem}", fix=fix)
        self.bundle = bundle
        self.file = file
        self.line = line
        self.problem = problem


class PolicyViolation(IkkaiError):
    """Policy lint found problems that are not waived; nothing was written to Connect."""

    def __init__(self, bundle: str, findings: list[tuple[str, str, str, str]]) -> None:
        # findings: (check, connector, message, fix)
        first = findings[0]
        more = f" (and {len(findings) - 1} more; run `ikkai bundle lint`)" if len(findings) > 1 else ""
        super().__init__(
            f"bundle {bundle}: policy check {first[0]} failed for {first[1]}: {first[2]}{more}; nothing was written",
            fix=first[3],
        )
        self.bundle = bundle
        self.findings = findings
