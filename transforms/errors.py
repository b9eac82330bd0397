"""The two ways a transform goes wrong: a pipeline spec that names it badly, and a transform defined badly.

Both render what went wrong, where, and what to do; callers branch on the class and its fields.
"""

from __future__ import annotations

from ikkai.errors import ConfigError, IkkaiError


class TransformSpecError(ConfigError):
    """A pipeline spec (or a step of it) is wrong: unknown transform, bad parameter, missing input column.

    ``source`` is the spec file (or whatever the spec came from), ``index`` the 0-based position of the
    step under ``transforms:`` (None for the file as a whole), ``line`` its line in the file when known,
    ``transform`` the step's transform name when known.
    """

    def __init__(
        self,
        source: str,
        problem: str,
        fix: str | None = None,
        *,
        index: int | None = None,
        transform: str | None = None,
        line: int | None = None,
    ) -> None:
        where = f"{source} line {line}" if line is not None else source
        if index is not None:
            key = f"transforms[{index}] {transform}" if transform else f"transforms[{index}]"
        else:
            key = transform or "transforms"
        super().__init__(where, key, problem, fix)
        self.spec = source
        self.index = index
        self.transform = transform
        self.line = line


class TransformDefinitionError(IkkaiError):
    """A registered transform is defined wrongly (signature, docstring, examples, duplicate name).

    Raised when its module is imported, so a broken transform never reaches a pipeline.
    """

    def __init__(self, transform: str, problem: str, fix: str) -> None:
        super().__init__(f"transform {transform}: {problem}", fix=fix)
        self.transform = transform
        self.problem = problem
