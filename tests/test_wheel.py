"""An installed wheel works like the checkout: its data (schemas, model, bundles, transform spec) is in it and found.

The wheel is built from a copy of the source tree (the build leaves nothing in the checkout) and
installed without dependencies into a fresh venv, which sees this environment's packages through a
``.pth`` file (no network, no second download of pyspark). The installed code runs from a folder
outside the repository with PYTHONPATH unset, so nothing can be found "next to the checkout".

The light client is the wheel installed as a service installs it, ``pip install ikkai`` with no
extras, into a venv of its own: its dependencies come from the package index (at the locked
versions), and it emits to the real outbox sink and reads the receipt back without pyspark.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement

from cli.app import cli
from demo.receiver import ReferenceReceiver
from ikkai.settings import Endpoints
from outbox_sink import derive_idempotency_key
from spark_jobs.model.fraud_model import FraudModel
from tests.docs.guide import read_guide
from tests.outbox_sink.conftest import deploy_sink

REPO = Path(__file__).resolve().parents[1]
_NOT_SOURCES = shutil.ignore_patterns(
    ".*", "__pycache__", "*.egg-info", "build", "dist", "target", "tests", "benchmarks", "docs"
)
DATA = {  # data folders, relative to the repo and to the wheel's root alike
    "schemas": "ikkai/contract/schemas",
    "model": "spark_jobs/model/artifacts",
    "bundles": "connectors/bundles",
    "SMT sources": "connectors/plugins/ikkai-smt/src",
    "outbox sink sources": "outbox_sink/connector/src",
}
DATA_FILES = (
    "spark_jobs/enrich/*.yaml", "transforms/*.csv", "connectors/*.yaml", "connectors/plugins/*/pom.xml",
    "outbox_sink/connector/pom.xml", "deploy/serve/page/templates/*.html", "deploy/serve/page/static/*",
    "demo/templates/*.html",
)  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    shutil.copytree(REPO, work / "src", ignore=_NOT_SOURCES)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(work / "src")]
    out = subprocess.run(build, cwd=work, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    (built,) = (work / "dist").glob("ikkai-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)]
    out = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # This environment's dependencies, after the venv's own site-packages (so ikkai comes from the wheel).
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def _run(venv: Path, *command: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("IKKAI_")}, **(env or {})}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_holds_every_data_file_of_the_checkout(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind, folder in DATA.items():
        expected = {p.relative_to(REPO).as_posix() for p in (REPO / folder).rglob("*") if p.is_file()}
        expected = {n for n in expected if "__pycache__" not in n}
        assert expected, f"no {kind} in {folder}"
        assert expected <= names, f"{kind} missing from the wheel: {sorted(expected - names)}"
    for pattern in DATA_FILES:
        expected = {p.relative_to(REPO).as_posix() for p in REPO.glob(pattern)}
        assert expected and expected <= names, (pattern, sorted(expected - names))


def test_the_installed_wheel_renders_a_shipped_bundle(venv: Path, tmp_path: Path) -> None:
    render = ("bundle", "render", "payments-ingest", "-o", "json")
    installed = _run(venv, str(venv / "bin" / "ikkai"), *render, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    checkout = CliRunner().invoke(cli, list(render))
    assert checkout.exit_code == 0, checkout.output
    rendered = json.loads(installed.stdout)
    assert rendered == json.loads(checkout.stdout)  # the same bundle, values and clusters file as the checkout's
    assert all(c["config"]["connector.class"] for c in rendered["connectors"]) and rendered["connectors"]


_PROBE = """
import json, sys
import cli, connectors, deploy, ikkai, spark_jobs, transforms
from demo.payments_simulation import payment_records, simulate
from ikkai.contract.codec import default_codec, schemas_dir
from spark_jobs.model.fraud_model import MODEL_PATH, FraudModel, load_snapshots

codec = default_codec()
payment = payment_records(simulate(7, payments=1).payments)[0]
data = codec.encode("payment_event", payment, version=1)
print(json.dumps({
    "roundtrip": codec.decode("payment_event", data, version=1) == payment,
    "latest": codec.decode("payment_event", data)["payment_id"] == payment["payment_id"],
    "schemas": codec.catalog.names(),
    "model": FraudModel.load().version,
    "snapshots": len(load_snapshots()),
    "files": [m.__file__ for m in (cli, connectors, deploy, ikkai, spark_jobs, transforms)]
             + [str(schemas_dir()), str(MODEL_PATH)],
}))
"""


def test_the_installed_wheel_encodes_a_payment_and_loads_the_model(venv: Path, tmp_path: Path) -> None:
    from ikkai.contract.codec import default_codec

    out = _run(venv, str(venv / "bin" / "python"), "-c", _PROBE, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("{"), out.stdout + out.stderr
    seen = json.loads(out.stdout)
    assert seen["roundtrip"] and seen["latest"]
    assert seen["schemas"] == default_codec().catalog.names()
    assert seen["model"] == FraudModel.load().version  # the same artifact bytes as the checkout's
    assert seen["snapshots"] > 0
    for file in seen["files"]:  # code and data from the venv, nothing from the checkout
        assert Path(file).is_relative_to(venv), file
        assert not Path(file).is_relative_to(REPO), file


def test_the_installed_wheel_builds_the_connect_plugins_from_its_own_sources(venv: Path, tmp_path: Path) -> None:
    """``ikkai setup`` from a wheel finds the Maven modules (and the schemas the sink copies in) in site-packages."""
    probe = (
        "import json; from stack import local_plugins as lp; "
        "print(json.dumps({p.name: [str(p.module / 'pom.xml'), lp.fingerprint(p), *map(str, p.inputs)] "
        "for p in lp.PLUGINS}))"
    )
    out = _run(venv, str(venv / "bin" / "python"), "-c", probe, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    from stack import local_plugins as lp

    installed = json.loads(out.stdout)
    assert set(installed) == {p.name for p in lp.PLUGINS}
    for plugin in lp.PLUGINS:
        pom, fingerprint, *inputs = installed[plugin.name]
        assert Path(pom).is_file() and Path(pom).is_relative_to(venv), pom
        assert all(Path(i).is_dir() and Path(i).is_relative_to(venv) for i in inputs), inputs
        assert fingerprint == lp.fingerprint(plugin)  # same sources: the same plugin folder as the checkout's


# Each install (its extras) and the code it is for: every module of these packages imports with only its dependencies.
INSTALLS = {
    "ikkai": (["ikkai", "outbox_sink"], ["ikkai.contract.registry"]),  # the light client: emitter, receipts, codec
    "ikkai[registry]": (["ikkai", "outbox_sink"], []),  # and the schema-registry codec
    "ikkai[control]": (["cli", "deploy", "stack", "connectors"], ["stack.docker_stack"]),  # that one: [docker]
    "ikkai[docker]": (["stack"], []),  # the control plane and its docker runtime
    "ikkai[jobs]": (["spark_jobs", "transforms"], ["spark_jobs.model.training"]),
    "ikkai[train]": (["spark_jobs"], []),
    "ikkai[all]": (
        ["ikkai", "outbox_sink", "cli", "deploy", "stack", "connectors", "spark_jobs", "transforms", "demo"],
        [],
    ),
}
_IMPORT_ALL = """
import importlib, json, pkgutil, sys
blocked = set(sys.argv[1].split(","))
class Uninstalled:  # as if the blocked distributions were not installed
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Uninstalled())
skip = set(sys.argv[3].split(",")) - {""}
failed = {}
for package in sys.argv[2].split(","):
    root = importlib.import_module(package)
    names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
    for name in names:
        if name.endswith(".__main__") or name in skip:
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failed[name] = str(exc)
print(json.dumps(failed))
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(extras: set[str], project: dict[str, object]) -> list[Requirement]:
    """What ``pip install 'ikkai[extras]'`` asks for, ikkai's own extras (``ikkai[jobs]``) followed."""
    optional: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    wanted: list[Requirement] = []
    for spec in [*project["dependencies"], *(d for e in extras for d in optional[e])]:  # type: ignore[misc]
        requirement = Requirement(spec)
        if _canonical(requirement.name) == "ikkai":
            wanted += _requirements(set(requirement.extras), project)
        else:
            wanted.append(requirement)
    return wanted


def _installed_with(wanted: list[Requirement]) -> set[str]:
    """The distributions ``wanted`` installs, as this environment's metadata says (markers and extras evaluated)."""
    found: set[tuple[str, str]] = set()
    todo = [(_canonical(r.name), extra) for r in wanted for extra in ["", *r.extras]]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in found:
            continue
        found.add((name, extra))
        for spec in metadata.distribution(name).requires or []:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                todo += [(_canonical(requirement.name), e) for e in ["", *requirement.extras]]
    return {name for name, _ in found}


@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_each_install_carries_what_its_code_imports(install: str) -> None:
    """Every module of the install's packages imports with every other installed distribution made unimportable."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = set(install.removeprefix("ikkai").strip("[]").split(",")) - {""}
    allowed = _installed_with(_requirements(extras, project)) | {"ikkai"}
    blocked = sorted(
        module
        for module, distributions in metadata.packages_distributions().items()
        if module not in sys.stdlib_module_names and not {_canonical(d) for d in distributions} & allowed
    )
    packages, skip = INSTALLS[install]
    command = [sys.executable, "-c", _IMPORT_ALL, ",".join(blocked), ",".join(packages), ",".join(skip)]
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    failed = json.loads(out.stdout)
    assert failed == {}, f"{install} lacks what these import: {failed}"


# What a service's plain `pip install ikkai` must not bring along (distribution names, as pip lists them).
NOT_IN_THE_LIGHT_CLIENT = {
    "pyspark", "py4j", "pandas", "pyarrow", "numpy", "scikit-learn", "scipy",
    "jinja2", "pyyaml", "click", "requests",
}  # fmt: skip


@pytest.fixture(scope="module")
def light_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel with its base dependencies only, fetched by pip at the locked versions."""
    root = tmp_path_factory.mktemp("light") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    install = [
        sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "-q",
        "--constraint", str(REPO / "constraints.txt"), str(wheel),
    ]  # fmt: skip
    out = subprocess.run(install, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return root


def _distributions(venv: Path) -> set[str]:
    listing = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "list", "--format", "json"]
    out = subprocess.run(listing, capture_output=True, text=True, timeout=120, check=True)
    return {d["name"].lower().replace("_", "-") for d in json.loads(out.stdout)}


def test_the_light_client_installs_without_spark_pandas_or_scikit_learn(light_venv: Path, tmp_path: Path) -> None:
    installed = _distributions(light_venv)
    assert {"ikkai", "confluent-kafka", "fastavro"} <= installed
    assert not installed & NOT_IN_THE_LIGHT_CLIENT, sorted(installed & NOT_IN_THE_LIGHT_CLIENT)
    probe = "import importlib.util as u; print(','.join(m for m in ('pyspark', 'pandas', 'sklearn') if u.find_spec(m)))"
    out = _run(light_venv, str(light_venv / "bin" / "python"), "-c", probe, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr
    # The console script is installed with every wheel; without the control-plane extra it says what to install.
    out = _run(light_venv, str(light_venv / "bin" / "ikkai"), "--help", cwd=tmp_path)
    assert out.returncode == 1 and "pip install 'ikkai[control]'" in out.stderr, out.stdout + out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.integration
def test_the_light_client_emits_to_the_real_sink_and_reads_the_receipts(
    light_venv: Path, stack: Endpoints, tmp_path: Path
) -> None:
    """docs/outbox.md's service, word for word, run by the light venv's python from outside the repository."""
    script = tmp_path / "service.py"
    script.write_text(read_guide("outbox.md").files["service.py"])
    with ReferenceReceiver(tmp_path / "receiver.sqlite") as receiver:
        sink = deploy_sink(stack, receiver)
        try:
            env = {
                "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
                "OUTBOX_REQUESTS_TOPIC": sink.requests_topic,
                "OUTBOX_RECEIPTS_TOPIC": sink.receipts_topic,
            }
            out = _run(light_venv, str(light_venv / "bin" / "python"), str(script), cwd=tmp_path, env=env)
        finally:
            sink.client.delete_connector(sink.name)
        applied = receiver.applied()

    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["pay-1 hold-payment DELIVERED", "pay-2 hold-payment DELIVERED"]
    # What the API really did: each hold once, under the key of its decision and effect.
    assert sorted(a.path for a in applied) == ["/payments/holds/pay-1", "/payments/holds/pay-2"]
    for a in applied:
        assert a.idempotency_key == derive_idempotency_key(a.headers["x-ikkai-decision-id"], "hold-payment")
