"""One fingerprint rule for every Maven product of the stack: the input files' names and contents."""

from __future__ import annotations

from pathlib import Path

from stack.maven_build import fingerprint


def test_the_fingerprint_is_16_hex_digits_of_names_and_contents(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project/>")
    digest = fingerprint([("pom.xml", pom)])
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert fingerprint([("pom.xml", pom)]) == digest
    assert fingerprint([("other/pom.xml", pom)]) != digest, "the name is part of it"
    pom.write_text("<project><!-- edited --></project>")
    assert fingerprint([("pom.xml", pom)]) != digest, "and so is the content"


def test_no_file_runs_into_the_next(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("x")
    b.write_text("")
    moved_a, moved_b = tmp_path / "moved_a", tmp_path / "moved_b"
    moved_a.write_text("")
    moved_b.write_text("x")
    assert fingerprint([("a", a), ("b", b)]) != fingerprint([("a", moved_a), ("b", moved_b)])
