from pathlib import Path

from deploy.artifacts import COMPLETE, POM, fingerprint, pom_files, resolved_jars


def test_every_module_pom_is_part_of_the_fingerprint() -> None:
    names = {p.relative_to(POM.parent).as_posix() for p in pom_files()}
    assert {"pom.xml", "maven/kafka/pom.xml", "maven/connect-file/pom.xml", "maven/spark/pom.xml"} <= names


def test_fingerprint_changes_with_pom_content(tmp_path: Path) -> None:
    copies = []
    for pom in pom_files():
        copy = tmp_path / pom.relative_to(POM.parent)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(pom.read_bytes())
        copies.append(copy)
    assert fingerprint(copies, tmp_path) == fingerprint()
    copies[-1].write_bytes(copies[-1].read_bytes().replace(b"</project>", b"<!-- edited --></project>"))
    assert fingerprint(copies, tmp_path) != fingerprint()


def test_an_incomplete_jar_folder_is_not_used(tmp_path: Path) -> None:
    root = tmp_path / fingerprint()
    (root / "kafka").mkdir(parents=True)
    assert resolved_jars(tmp_path) is None
    (root / COMPLETE).write_text("done")
    ready = resolved_jars(tmp_path)
    assert ready is not None and ready.kafka == root / "kafka"
