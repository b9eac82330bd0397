from pathlib import Path

from ikkai.settings import recorded_spark_jars
from stack.artifacts import COMPLETE, POM, JarSet, ensure_jars, fingerprint, pom_files, resolved_jars


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


def test_the_spark_jars_are_recorded_for_jobs_that_cannot_import_the_resolver(tmp_path: Path) -> None:
    root = tmp_path / fingerprint()
    (root / "spark").mkdir(parents=True)
    (root / COMPLETE).write_text("done")
    jar = root / "spark" / "spark-sql-kafka.jar"
    jar.write_bytes(b"PK")
    assert recorded_spark_jars(tmp_path) is None  # nothing recorded yet
    assert ensure_jars(tmp_path) == JarSet(root)  # complete: no Maven, but the listing is written
    assert recorded_spark_jars(tmp_path) == [jar]
    jar.unlink()
    assert recorded_spark_jars(tmp_path) is None  # a listed jar that is gone is not half a classpath
