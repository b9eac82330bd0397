"""Reading a guide in docs/ the way a user follows it: its files and its commands, in order.

A guide marks what a test must take from it with an HTML comment right before a fenced block:
``<!-- guide-file: <path> -->`` (write the block to that path) and ``<!-- guide-run: <name> -->``
(run the block's lines, one command each). Markdown renders neither comment.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
_MARKED = re.compile(r"<!-- guide-(file|run): (\S+) -->\n```[^\n]*\n(.*?)```", re.S)


@dataclass(frozen=True)
class Guide:
    files: dict[str, str]
    runs: dict[str, list[list[str]]]


def read_guide(name: str) -> Guide:
    text = (DOCS / name).read_text()
    files: dict[str, str] = {}
    runs: dict[str, list[list[str]]] = {}
    for kind, label, body in _MARKED.findall(text):
        if kind == "file":
            files[label] = body
        else:
            runs[label] = [shlex.split(line) for line in body.splitlines() if line.strip()]
    assert files or runs, f"docs/{name} marks no guide-file or guide-run block"
    return Guide(files, runs)
