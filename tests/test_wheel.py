"""An installed wheel works like the checkout: its data (schemas, model, bundles, transform spec) is in it and found.

The wheel is built from a copy of the source tree (the build leaves nothing in the checkout) and
installed without dependencies into a fresh venv, which sees this environment's packages through a
``.pth`` file (no network, no second download of pyspark). The installed code runs from a folder
outside the repository with PYTHONPATH unset, so nothing can be found "next to the checkout".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from spark_jobs.model.fraud_model import FraudModel

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
    "spark_jobs/*.yaml", "transforms/*.csv", "connectors/*.yaml", "connectors/plugins/*/pom.xml",
    "outbox_sink/connector/pom.xml",
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


def _run(venv: Path, *command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("IKKAI_")}
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
        "import json; from deploy import local_plugins as lp; "
        "print(json.dumps({p.name: [str(p.module / 'pom.xml'), lp.fingerprint(p), *map(str, p.inputs)] "
        "for p in lp.PLUGINS}))"
    )
    out = _run(venv, str(venv / "bin" / "python"), "-c", probe, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    from deploy import local_plugins as lp

    installed = json.loads(out.stdout)
    assert set(installed) == {p.name for p in lp.PLUGINS}
    for plugin in lp.PLUGINS:
        pom, fingerprint, *inputs = installed[plugin.name]
        assert Path(pom).is_file() and Path(pom).is_relative_to(venv), pom
        assert all(Path(i).is_dir() and Path(i).is_relative_to(venv) for i in inputs), inputs
        assert fingerprint == lp.fingerprint(plugin)  # same sources: the same plugin folder as the checkout's
