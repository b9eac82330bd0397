"""The Jinja environment a bundle's templates run in: its own files only, and bounded work, size and time.

A template is code written by a bundle's author, run by render, lint, plan, CI and ``ikkai serve``.
Jinja's ``ImmutableSandboxedEnvironment`` already keeps it from Python internals and from changing
its values; this module adds what the sandbox leaves open:

- **Files.** ``BundleLoader`` serves only regular files inside the bundle folder, read without
  following a symbolic link anywhere on the way (a committed link to ``/proc/self/environ`` is refused,
  not read), never a values file (another environment's values) nor the manifest, never a hidden file,
  and at most ``MAX_TEMPLATE_BYTES``.
- **Work and time.** ``RenderBounds.steps`` counts every loop iteration, call, attribute and item read
  of one template's render; past it, or past ``RenderBounds.seconds``, rendering stops. Recursive
  ``for`` loops are refused (a macro calling itself is counted and, too deep, refused).
- **Size.** No string or list a template builds, and not its output, may exceed
  ``RenderBounds.characters``: ``*``, ``+``, ``%``, ``**`` and the filters and methods that grow a text
  are checked *before* they run, so a gigabyte is never allocated.

A bound crossed raises ``RenderStopped``, which ``connectors.render`` turns into a ``BundleError``.
"""

from __future__ import annotations

import functools
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox
from jinja2 import nodes
from jinja2.loaders import split_template_path
from jinja2.nodes import EvalContext

MAX_TEMPLATE_BYTES = 256 * 1024
_MAX_NAME = 255
_MACRO_STEPS = 20  # a macro call costs about what twenty loop iterations do
_WIDTH = re.compile(r"%[-#0 +]*(\d+|\*)?(?:\.(\d+|\*))?")  # a %-format's width and precision
_GROWING_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})  # str methods taking a width


@dataclass(frozen=True)
class RenderBounds:
    """What one template's render may take; connector configs are a few kB and a few hundred steps."""

    steps: int = 300_000  # loop iterations, calls, attribute and item reads
    characters: int = 1_000_000  # the output, and any one string or list built on the way
    seconds: float = 10.0


class RenderStopped(Exception):
    """A bound of ``RenderBounds`` was crossed; ``what`` says which, in the user's words."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class TemplateRefused(jinja2.TemplateNotFound):
    """A template name that the bundle loader will not serve, and why."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name, f"{name} {reason}")
        self.reason = f"{name} {reason}"


class BundleLoader(jinja2.BaseLoader):
    """The bundle's own template files, read without following links (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder  # resolved by ``load_bundle``

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        if len(template) > _MAX_NAME:  # a name is an expression: it may be built long, and is quoted in errors
            raise TemplateRefused(f"{template[:40]}…", f"is not a template name (over {_MAX_NAME} characters)")
        pieces = split_template_path(template)  # refuses ".." and empty names
        name = "/".join(pieces)
        if pieces[0] == "values":
            raise TemplateRefused(name, "holds environment values: a template reads its own as variables")
        if pieces == ["bundle.yaml"]:
            raise TemplateRefused(name, "is the manifest, not a template")
        if any(p.startswith(".") for p in pieces):
            raise TemplateRefused(name, "is hidden: a template is a visible file of the bundle")
        path = self.folder
        for index, piece in enumerate(pieces):
            path = path / piece
            try:
                found = os.lstat(path)
            except FileNotFoundError:
                raise jinja2.TemplateNotFound(template) from None
            if stat.S_ISLNK(found.st_mode):
                raise TemplateRefused("/".join(pieces[: index + 1]), "is a symbolic link")
        return _read_plain(path, name), str(path), lambda: True


def _read_plain(path: Path, name: str) -> str:
    """The file's text, opened without following a link (one swapped in after the check is refused too)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TemplateRefused(name, f"cannot be read ({exc.strerror})") from None
    with os.fdopen(descriptor, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise TemplateRefused(name, "is not a regular file")
        data = source.read(MAX_TEMPLATE_BYTES + 1)
    if len(data) > MAX_TEMPLATE_BYTES:
        raise TemplateRefused(name, f"is over {MAX_TEMPLATE_BYTES // 1024} KiB")
    return data.decode("utf-8", "replace")


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, counting steps and checking sizes; ``begin`` starts one template's budget."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, folder: Path, bounds: RenderBounds) -> None:
        super().__init__(  # no autoescape: renders JSON configs, not HTML
            loader=BundleLoader(folder), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
        )
        self.bounds = bounds
        self._steps = 0
        self._deadline = math.inf
        self.filters = {name: self._bounded_filter(f) for name, f in self.filters.items()}
        self.filters["ikkai_loop"] = self._loop
        del self.globals["lipsum"]  # generates text in a Python loop no step sees; configs need no lorem ipsum
        self.filters["ikkai_concat"] = self.concat

    def concat(self, parts: Iterable[Any]) -> str:
        """Every text a template assembles (its output, a macro's, a ``set`` block's, ``~``): sized, then joined."""
        texts = [str(part) for part in parts]
        self.fits(sum(map(len, texts)))
        return "".join(texts)

    def begin(self) -> None:
        self._steps = 0
        self._deadline = time.monotonic() + self.bounds.seconds

    def render(self, template: jinja2.Template, values: dict[str, Any]) -> str:
        """The template's text, streamed so that its size is checked as it grows."""
        self.begin()
        out: list[str] = []
        size = 0
        for chunk in template.generate(values):
            size += len(chunk)
            self.fits(size)
            self.step()
            out.append(chunk)
        return "".join(out)

    def step(self, cost: int = 1) -> None:
        self._steps += cost
        if self._steps > self.bounds.steps:
            raise RenderStopped(f"more than {self.bounds.steps:,} steps (loop iterations, calls, reads)")
        if self._steps % 256 < cost and time.monotonic() > self._deadline:
            raise RenderStopped(f"not done after {self.bounds.seconds:g} seconds")

    def fits(self, size: int) -> None:
        if size > self.bounds.characters:
            raise RenderStopped(f"a text or list of more than {self.bounds.characters:,} characters or items")

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        for joined in tree.find_all(nodes.Concat):  # ``a ~ b``: sized before it is built, as ``+`` is
            joined.nodes = [nodes.Filter(nodes.List(joined.nodes), "ikkai_concat", [], [], None, None)]
        for loop in tree.find_all(nodes.For):
            if loop.recursive:
                raise jinja2.TemplateSyntaxError("recursive for loops are not allowed", loop.lineno, name, filename)
            loop.iter = nodes.Filter(loop.iter, "ikkai_loop", [], [], None, None, lineno=loop.lineno)
        return tree

    def _loop(self, items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            self.step()
            yield item

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.step()
        return super().getitem(obj, argument)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self.step(_MACRO_STEPS if isinstance(__obj, jinja2.runtime.Macro) else 1)
        if getattr(__obj, "__name__", None) in _GROWING_METHODS and isinstance(getattr(__obj, "__self__", None), str):
            __self.fits(max([0, *(a for a in args if isinstance(a, int))]))
        if getattr(__obj, "__name__", None) == "replace" and isinstance(getattr(__obj, "__self__", None), str):
            __self._check_replace(__obj.__self__, *args[:2])
        return __self._sized(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        self.step()
        if operator == "**" and isinstance(left, int) and isinstance(right, int):
            if abs(left) > 1 and right * math.log10(abs(left)) > self.bounds.characters:
                raise RenderStopped(f"a number of more than {self.bounds.characters:,} digits")
        elif operator == "*" and isinstance(left, int) and isinstance(right, int):
            if (left.bit_length() + right.bit_length()) * math.log10(2) > self.bounds.characters:
                raise RenderStopped(f"a number of more than {self.bounds.characters:,} digits")
        elif operator == "*":
            for text, times in ((left, right), (right, left)):
                if isinstance(text, Sized) and isinstance(times, int):
                    self.fits(len(text) * times)
        elif operator == "+" and isinstance(left, Sized) and isinstance(right, Sized):
            self.fits(len(left) + len(right))
        elif operator == "%" and isinstance(left, str):
            self._check_format(left)
        return self._sized(super().call_binop(context, operator, left, right))

    def _check_format(self, text: str) -> None:
        for width, precision in _WIDTH.findall(text):
            self.fits(max(int(n) if n.isdigit() else 0 for n in (width, precision)))
            if "*" in (width, precision):
                raise RenderStopped("a %-format with a width taken from its arguments ('*')")

    def _check_replace(self, text: str, old: Any = "", new: Any = "") -> None:
        if isinstance(old, str) and isinstance(new, str):
            self.fits(len(text) + (text.count(old) + 1) * max(0, len(new) - len(old)))

    def _sized(self, result: Any) -> Any:
        if isinstance(result, (str, list, tuple)):
            self.fits(len(result))
        return result

    def _bounded_filter(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` counted as a step, with the sizes it may build checked before and after it runs."""
        name = getattr(function, "__name__", "")

        @functools.wraps(function)  # keeps Jinja's pass_context / pass_environment marks
        def bounded(*args: Any, **kwargs: Any) -> Any:
            self.step()
            args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)  # sized below, then used
            plain = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.Environment, EvalContext))]
            widths = [a for a in [*plain[1:], *kwargs.values()] if isinstance(a, int)]
            if name in ("do_batch", "do_slice", "do_truncate"):  # loop or build in Python up to their number
                self.fits(max([0, *widths]))
            elif name in ("do_center", "do_indent", "do_wordwrap"):
                lines = str(plain[0]).count("\n") + 1 if plain else 1
                self.fits(max([0, *widths]) * lines)
            elif name == "do_format" and plain and isinstance(plain[0], str):
                self._check_format(plain[0])
            elif name == "do_replace" and len(plain) >= 3:
                self._check_replace(str(plain[0]), plain[1], plain[2])
            elif name == "do_join" and plain and isinstance(plain[0], Sized) and isinstance(plain[0], Iterable):
                separator = plain[1] if len(plain) > 1 and isinstance(plain[1], str) else ""
                self.fits(sum(len(str(x)) + len(separator) for x in plain[0]))
            return self._sized(function(*args, **kwargs))

        return bounded
