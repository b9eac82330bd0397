"""The CRD schemas cluster exports are validated against, obtained from their projects' own artifacts.

Strimzi: ``io.strimzi:api`` on Maven Central holds the custom resource classes; Strimzi's build turns
them into the CRD YAML it installs with ``io.strimzi:crd-generator`` (the api artifact's pom runs
``io.strimzi.crdgenerator.CrdGenerator --crd-api-version v1 --api-versions v1 --storage-version v1``).
Here Maven resolves both artifacts at ``STRIMZI_VERSION`` and the same generator, with the same
arguments, writes the CRDs into a cache folder (pytest's cache, else a temporary one). The generator
is built for Java 21, so a JDK 21+ is looked for next to the default Java 17.

The Spark operator's ``SparkApplication`` CRD is read from ``SPARK_OPERATOR_CRD``.

Validation is structural as the Kubernetes API server applies it, and stricter in one way: a field the
schema does not declare is an error (the API server would silently prune it, and the setting would be
lost), unless the schema says ``x-kubernetes-preserve-unknown-fields``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

STRIMZI_VERSION = "1.2.0"
# The Kubeflow Spark operator's SparkApplication CRD: on neither Maven Central nor PyPI, so a trimmed copy of the
# released one ships here (its header says from where and what was trimmed).
SPARK_OPERATOR_CRD = Path(__file__).with_name("crds") / "sparkoperator.k8s.io_sparkapplications.v2.5.2.yaml"
STRIMZI_CRDS = {
    "KafkaConnector": "io.strimzi.api.kafka.model.connector.KafkaConnector",
    "KafkaConnect": "io.strimzi.api.kafka.model.connect.KafkaConnect",
}
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <groupId>dev.ikkai.tests</groupId><artifactId>strimzi-crds</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>io.strimzi</groupId><artifactId>api</artifactId><version>{v}</version></dependency>
    <dependency><groupId>io.strimzi</groupId><artifactId>crd-generator</artifactId><version>{v}</version></dependency>
  </dependencies>
</project>
"""


class NoSuitableJava(RuntimeError):
    pass


def _java_major(java: Path) -> int | None:
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30, check=False).stderr
    except OSError:
        return None
    match = re.search(r'version "(\d+)', out)
    return int(match.group(1)) if match else None


def java_at_least(major: int) -> Path:
    """A java binary of at least ``major``: $JAVA_HOME, PATH, then every JDK under /usr/lib/jvm."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    if shutil.which("java"):
        candidates.append(Path(str(shutil.which("java"))))
    candidates += sorted(Path("/usr/lib/jvm").glob("*/bin/java"), reverse=True)
    for java in candidates:
        found = _java_major(java)
        if found is not None and found >= major:
            return java
    raise NoSuitableJava(f"no Java {major}+ found (tried {', '.join(map(str, candidates)) or 'nothing'})")


def strimzi_crds(cache: Path) -> dict[str, dict[str, Any]]:
    """Kind → the CRD Strimzi ``STRIMZI_VERSION`` installs, generated once into ``cache``."""
    folder = cache / f"strimzi-{STRIMZI_VERSION}"
    done = folder / ".complete"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pom.xml").write_text(_POM.format(v=STRIMZI_VERSION))
        lib = folder / "lib"
        mvn = shutil.which("mvn") or "mvn"
        subprocess.run(
            [mvn, "-B", "-q", "-f", str(folder / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
            check=True, timeout=600,
        )  # fmt: skip
        command = [str(java_at_least(21)), "-cp", f"{lib}/*", "io.strimzi.crdgenerator.CrdGenerator",
                   "--label", "app:strimzi", "--target-kube", "1.16+", "--crd-api-version", "v1",
                   "--api-versions", "v1", "--storage-version", "v1"]  # fmt: skip
        for kind, cls in STRIMZI_CRDS.items():
            command += ["--yaml", f"{cls}={folder / f'{kind}.yaml'}"]
        subprocess.run(command, check=True, timeout=300, capture_output=True)
        done.write_text(" ".join(command))
    return {kind: yaml.safe_load((folder / f"{kind}.yaml").read_text()) for kind in STRIMZI_CRDS}


def version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
    schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
    return schema


def _strict(schema: Any, *, structural: bool = True) -> Any:
    """A copy in which an object with declared properties refuses undeclared ones (what the API server prunes).

    Inside ``oneOf``/``anyOf``/``allOf``/``not`` properties only constrain values (Kubernetes' structural schemas
    prune by the outer ``properties`` alone), so those branches are left as they are.
    """
    if isinstance(schema, list):
        return [_strict(s, structural=structural) for s in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {}
    for key, value in schema.items():
        branch = key in ("oneOf", "anyOf", "allOf", "not")
        copy[key] = _strict(value, structural=structural and not branch)
    if structural and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        copy.setdefault("additionalProperties", False)
    return copy


def validation_errors(crd: dict[str, Any], resource: dict[str, Any]) -> list[str]:
    """What the CRD's schema says about ``resource``: empty when it is valid; unknown fields count as errors."""
    group, _, version = resource.get("apiVersion", "").partition("/")
    problems = []
    if group != crd["spec"]["group"] or resource.get("kind") != crd["spec"]["names"]["kind"]:
        problems.append(f"{resource.get('apiVersion')}/{resource.get('kind')} is not {crd['spec']['group']}")
    served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    if version not in served:
        return [*problems, f"version {version!r} is not served (served: {served})"]
    validator = jsonschema.Draft4Validator(_strict(version_schema(crd, version)))
    problems += [
        f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in _errors(validator, resource)
    ]
    return problems


def _errors(validator: jsonschema.Draft4Validator, resource: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    return iter(sorted(validator.iter_errors(resource), key=lambda e: list(map(str, e.absolute_path))))
