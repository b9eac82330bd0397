"""The repository stands alone: nothing points to documents outside it, and its doc links resolve.

Users get this repository and nothing else, so no file may send them to a design or style document
that lives elsewhere (the design is docs/architecture.md), and every relative link in README.md,
BENCHMARKS.md and docs/*.md must lead to a file of the repository (and, with a ``#fragment``, to one of its
headings).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Documents that live outside the repository, spelled in pieces so that this file names none of them.
OUTSIDE = re.compile(
    rb"\bDESIGN" rb"\.md|\bDESIGN" rb" rules?\b|\bSTYLE" rb"\.md|\.\./" rb"shared\b|/work/" rb"shared\b"
)
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
FENCE = re.compile(r"^\s{0,3}(```|~~~).*?^\s{0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def repository_files() -> set[str]:
    """Tracked files and new files not ignored by .gitignore, as POSIX paths relative to the root."""
    if not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: cannot tell the repository's files from others")
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    return {name for name in listing.decode().split("\0") if name and (ROOT / name).is_file()}


def outside_mentions(name: str, data: bytes) -> list[str]:
    """``path:line: text`` for every mention of a document outside the repository in ``data``."""
    found = []
    for match in OUTSIDE.finditer(data):
        line = data.count(b"\n", 0, match.start()) + 1
        found.append(f"{name}:{line}: {match.group().decode()}")
    return found


def without_fences(markdown: str) -> str:
    """The text with fenced code blocks blanked out: a ``#`` line there is not a heading."""
    return FENCE.sub(lambda m: "\n" * m.group().count("\n"), markdown)


def without_code(markdown: str) -> str:
    """The text with fenced code blocks and code spans blanked out: links there are not."""
    return CODE_SPAN.sub("", without_fences(markdown))


def links(markdown: str) -> list[str]:
    """The targets of inline and reference links outside code."""
    text = without_code(markdown)
    return [m.group(1) for m in (*LINK.finditer(text), *REFERENCE.finditer(text))]


def anchor(heading: str) -> str:
    """GitHub's fragment for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.replace("`", "").lower()).replace(" ", "-")


def broken_links(name: str, markdown: str, files: set[str]) -> list[str]:
    """``path: target (why)`` for every relative link of ``markdown`` that leads nowhere in the repository."""
    broken = []
    for target in links(markdown):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue  # http:, https:, mailto:: not a file of the repository
        path, _, fragment = target.partition("#")
        here = PurePosixPath(name).parent
        resolved = PurePosixPath(name) if not path else _normalized(here / path)
        if resolved is None:
            broken.append(f"{name}: {target} (leaves the repository)")
            continue
        key = str(resolved)
        if key not in files and not any(f.startswith(key.rstrip("/") + "/") for f in files):
            broken.append(f"{name}: {target} (no such file in the repository)")
        elif fragment and key.endswith(".md") and key in files:
            headings = {anchor(h) for h in HEADING.findall(without_fences((ROOT / key).read_text()))}
            if fragment not in headings:
                broken.append(f"{name}: {target} (no heading #{fragment} in {key})")
    return broken


def _normalized(path: PurePosixPath) -> PurePosixPath | None:
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part != ".":
            parts.append(part)
    return PurePosixPath(*parts)


def test_no_file_points_to_a_document_outside_the_repository() -> None:
    files = repository_files()
    found = [hit for name in sorted(files) for hit in outside_mentions(name, (ROOT / name).read_bytes())]
    assert not found, (
        "these files point to documents users never get; point to docs/architecture.md (the design and its rules),"
        " docs/exactly-once.md or docs/outbox.md instead:\n  " + "\n  ".join(found)
    )


def test_every_relative_link_in_the_docs_leads_to_a_file_of_the_repository() -> None:
    files = repository_files()
    docs = sorted(
        name for name in files if name in ("README.md", "BENCHMARKS.md") or re.fullmatch(r"docs/[^/]+\.md", name)
    )
    assert "BENCHMARKS.md" in docs
    assert "README.md" in docs and "docs/architecture.md" in docs
    broken = [hit for name in docs for hit in broken_links(name, (ROOT / name).read_text(), files)]
    assert not broken, "broken links (fix the target or the link):\n  " + "\n  ".join(broken)


def test_the_checks_find_what_they_look_for() -> None:
    files = {"README.md", "docs/outbox.md", "docs/architecture.md"}
    text = (
        "See [the design](../elsewhere.md), [outbox](docs/outbox.md#missing), [gone](docs/gone.md), [web](https://x.org),"
        " [up](../../etc/passwd) and `[code](nowhere.md)`.\n```\n[fenced](nowhere.md)\n```\n[ref]: docs/ref.md\n"
    )
    assert broken_links("README.md", text, files) == [
        "README.md: ../elsewhere.md (leaves the repository)",
        "README.md: docs/outbox.md#missing (no heading #missing in docs/outbox.md)",
        "README.md: docs/gone.md (no such file in the repository)",
        "README.md: ../../etc/passwd (leaves the repository)",
        "README.md: docs/ref.md (no such file in the repository)",
    ]
    mention = ("see DESIGN" + ".md rule 3\nand DESIGN" + " rule 7, " + "/work/" + "shared/STYLE" + ".md").encode()
    assert outside_mentions("x.py", mention) == [
        "x.py:1: DESIGN" + ".md",
        "x.py:2: DESIGN" + " rule",
        "x.py:2: /work/" + "shared",
        "x.py:2: STYLE" + ".md",
    ]
    assert anchor("The outbox: side effects, once") == "the-outbox-side-effects-once"
    # A code span in a heading keeps its text in the fragment, as on GitHub.
    headings = HEADING.findall(without_fences("## 7. `ikkai serve` over HTTPS\n```\n# not a heading\n```\n"))
    assert [anchor(h) for h in headings] == ["7-ikkai-serve-over-https"]


# The team's own issue tracker is not shipped: "issue 46 item 8", "#43 case 6" mean nothing to a user.
TRACKER = re.compile(r"\bissues? #?\d+,? (?:item|case)s? \d+|(?<![\w/-])#4\d,? (?:item|case)\b")


def test_the_docs_do_not_name_the_teams_issues() -> None:
    files = repository_files()
    docs = sorted(
        name for name in files if name in ("README.md", "BENCHMARKS.md") or re.fullmatch(r"docs/[^/]+\.md", name)
    )
    found = [
        f"{name}:{text.count(chr(10), 0, match.start()) + 1}: {match.group()}"
        for name in docs
        for text in [(ROOT / name).read_text()]
        for match in TRACKER.finditer(text)
    ]
    assert TRACKER.search("the row (issue 46 item 8)") and TRACKER.search("see #43 case 6")
    assert TRACKER.search("the sessions (issue 46, item 2)")
    assert not TRACKER.search("librdkafka issue #4605")
    assert not found, "say what the row is, not which issue asked for it:\n  " + "\n  ".join(found)
