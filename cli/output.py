"""How every ``ikkai`` command prints: results on stdout (``-o text`` tables or ``-o json``), progress and
errors on stderr.

With ``-o json`` an error is one JSON object on stderr too (``error_document``): the error's class, its
message, its structured fields and the fix; the exit code stays what it is in text mode. The option's
callback remembers the format for cli/app.py, which maps every error in one place.

Everything printed here passes the one redaction (``ikkai.redaction``) on its way out: a result, an error
(its message, fix and every field, a Connect URL's ``url`` included) and a progress line.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from ikkai.redaction import redact_data, redact_urls

F = TypeVar("F", bound=Callable[..., Any])
_chosen = {"output": "text"}  # the -o of the command being run, for the error mapping


def _remember(ctx: click.Context, param: click.Parameter, value: str) -> str:
    _chosen["output"] = value
    return value


output_option = click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="Result format on stdout; with json, errors are one JSON object on stderr.", callback=_remember,
)  # fmt: skip


def chosen_output(argv: list[str] | None = None) -> str:
    """The ``-o`` of this run: remembered by the option, else read from argv (a usage error may come first)."""
    if _chosen["output"] == "json":
        return "json"
    args = sys.argv[1:] if argv is None else argv
    for i, arg in enumerate(args):
        if arg in ("-o", "--output") and args[i + 1 : i + 2] == ["json"]:
            return "json"
        if arg in ("-ojson", "--output=json"):
            return "json"
    return "text"


def emit(data: dict[str, Any], output: str, text: Callable[[dict[str, Any]], str]) -> None:
    click.echo(json.dumps(redact_data(data), indent=2, sort_keys=True) if output == "json" else redact_urls(text(data)))


def _plain(value: Any) -> Any:
    """A field value as JSON can hold it: mappings and sequences kept, paths and the rest as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return str(value)


_NOT_FIELDS = frozenset({"message", "fix", "args"})


def error_document(exc: BaseException, *, fix: str | None = None) -> dict[str, Any]:
    """``{"error": class, "message": one line, "fields": {...}, "fix": ...}`` for ``-o json``, redacted."""
    fields = {k: _plain(v) for k, v in vars(exc).items() if not k.startswith("_") and k not in _NOT_FIELDS}
    message = getattr(exc, "message", None)
    if not isinstance(message, str):
        message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
    document = {
        "error": type(exc).__name__,
        "message": message,
        "fields": dict(sorted(fields.items())),
        "fix": getattr(exc, "fix", None) or fix,
    }
    redacted: dict[str, Any] = redact_data(document)
    return redacted


def show_error(exc: BaseException, text: str, *, fix: str | None = None) -> None:
    """One line (text) or one JSON object (``-o json``) on stderr."""
    if chosen_output() == "json":
        click.echo(json.dumps(error_document(exc, fix=fix), sort_keys=True), err=True)
    else:
        click.echo(redact_urls(text), err=True)


def say(text: str, *, err: bool = True) -> None:
    """A line for a person (stderr unless ``err`` is False), redacted like everything else this module prints."""
    click.echo(redact_urls(text), err=err)


def show_usage_error(exc: click.ClickException) -> None:
    """Click's own usage error (usage line, hint, the error naming the value given), redacted: a value may be a
    URL with a password in it."""
    shown = io.StringIO()
    exc.show(file=shown)
    click.echo(redact_urls(shown.getvalue()), err=True, nl=False)


def progress_printer(output: str) -> Callable[[str], None] | None:
    """Progress lines for a person, on stderr, each with the seconds since the command started.

    Always printed with ``-o text`` (a CI log then shows what apply waited for, and stdout stays the
    result); never with ``-o json``, where stderr carries nothing but an error object.
    """
    if output == "json":
        return None
    started = time.monotonic()

    def say(line: str) -> None:
        click.echo(f"[{time.monotonic() - started:5.1f}s] {redact_urls(line)}", err=True)

    return say
