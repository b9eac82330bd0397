"""``ikkai plugins package``: ikkai's own Connect plugins as zips a Connect cluster installs.

    ikkai plugins package --out dist/plugins      # builds if needed, prints path and SHA-512 per plugin

For Strimzi's ``KafkaConnect.spec.build.plugins`` (artifact type zip, with ``sha512sum``), Confluent's
``confluent connect plugin install``, or unzipping into any worker's ``plugin.path``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cli.output import emit, output_option
from ikkai.settings import jars_dir
from stack.local_plugins import package_archives


@click.group()
def plugins() -> None:
    """ikkai's Kafka Connect plugins (the outbox sink, the JsonFieldToKey transform)."""


def _text(data: dict[str, Any]) -> str:
    return "\n".join(f"{a['path']}  sha512:{a['sha512']}" for a in data["archives"])


@plugins.command()
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=Path("dist/plugins"), show_default=True,
    help="Folder the zips are written to.",
)  # fmt: skip
@output_option
def package(out: Path, output: str) -> None:
    """Build the plugins (Maven, JUnit tests included) and write one <plugin>-<version>.zip each."""
    archives = package_archives(jars_dir(), out)
    emit({"archives": [a.as_dict() for a in archives]}, output, _text)
