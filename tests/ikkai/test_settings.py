from pathlib import Path

import pytest

from ikkai.errors import ConfigError
from ikkai.settings import external_endpoints, ikkai_home, jars_dir, recorded_endpoints


def test_no_cluster_variables_means_the_embedded_stack() -> None:
    assert external_endpoints({}) is None


def test_both_cluster_variables_name_an_external_cluster() -> None:
    endpoints = external_endpoints(
        {"IKKAI_BOOTSTRAP_SERVERS": "k1:9092,k2:9092", "IKKAI_CONNECT_URL": "http://c:8083/"}
    )
    assert endpoints is not None
    assert endpoints.runtime == "external"
    assert endpoints.bootstrap_servers == "k1:9092,k2:9092"
    assert endpoints.connect_url == "http://c:8083"


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"IKKAI_BOOTSTRAP_SERVERS": "k:9092"}, "IKKAI_CONNECT_URL"),
        ({"IKKAI_CONNECT_URL": "http://c:8083"}, "IKKAI_BOOTSTRAP_SERVERS"),
    ],
)
def test_half_an_external_cluster_is_an_error(env: dict[str, str], missing: str) -> None:
    with pytest.raises(ConfigError) as caught:
        external_endpoints(env)
    assert caught.value.key == missing
    assert "set both" in str(caught.value)


def test_connect_url_must_be_http() -> None:
    with pytest.raises(ConfigError, match="not an http"):
        external_endpoints({"IKKAI_BOOTSTRAP_SERVERS": "k:9092", "IKKAI_CONNECT_URL": "c:8083"})


def test_home_and_jars_defaults(tmp_path: Path) -> None:
    assert ikkai_home({"IKKAI_HOME": str(tmp_path)}) == tmp_path.resolve()
    assert jars_dir({"IKKAI_HOME": str(tmp_path)}) == tmp_path.resolve() / "jars"
    assert jars_dir({"IKKAI_HOME": str(tmp_path), "IKKAI_JARS_DIR": "/opt/jars"}) == Path("/opt/jars")


def test_the_embedded_stack_records_its_endpoints_for_clients_that_do_not_import_it(tmp_path: Path) -> None:
    from stack.local_stack import LocalStack
    from stack.stack_config import Ports

    assert recorded_endpoints(tmp_path) is None  # never started here
    (tmp_path / "stack.json").write_text("{not json")
    assert recorded_endpoints(tmp_path) is None
    stack = LocalStack(tmp_path, tmp_path / "jars")
    ports = Ports(broker=21001, controller=21002, connect=21003)
    stack._write_state(ports)
    recorded = recorded_endpoints(tmp_path)
    assert recorded == stack.endpoints()
    assert recorded is not None and recorded.bootstrap_servers == "127.0.0.1:21001"
