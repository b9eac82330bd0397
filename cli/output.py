"""How every ``ikkai`` command prints its result: ``-o text`` (a table) or ``-o json`` (stable, sorted keys)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

output_option = click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="Result format on stdout.",
)  # fmt: skip


def emit(data: dict[str, Any], output: str, text: Callable[[dict[str, Any]], str]) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True) if output == "json" else text(data))
