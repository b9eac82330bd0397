"""A bundle's templates read only the bundle's own template files, and a render is bounded in work, size and time.

A template is code from a bundle's author (a pull request, linted in CI): it must not read a file
outside its bundle through a link or an include, nor another environment's values, nor hold a CI job
or ``ikkai serve`` for ever, nor build a gigabyte. Each refusal is one ``BundleError`` line naming the
template.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.errors import BundleError
from connectors.render import load_bundle, render_bundle
from tests.connectors.conftest import BundleFactory

SECRET = "ci-token-4f1d9c"  # noqa: S105 - planted, to show it never comes out
BODY = '{\n  "topic": "ingest.x",\n  "file": {{ text | tojson }}\n}\n'


MACRO_TWICE = "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"


def manifest(template: str = "templates/one.json.j2") -> dict[str, object]:
    return {"name": "b", "owner_prefix": "b.", "connectors": [{"name": "one", "template": template}]}


def including(what: str) -> str:
    return '{% set text %}{% include "' + what + '" %}{% endset %}' + BODY


def refused(folder: Path, env: str = "dev") -> BundleError:
    with pytest.raises(BundleError) as caught:
        render_bundle(load_bundle(folder), env)
    error = caught.value
    assert "\n" not in str(error), "a template error is one line"
    assert SECRET not in str(error)
    return error


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the bundle that holds a secret (as ``/proc/self/environ`` does on a CI runner)."""
    secret = tmp_path / "elsewhere" / "environ"
    secret.parent.mkdir()
    secret.write_text(f"CI_TOKEN={SECRET}\n")
    return secret


def test_an_include_through_a_link_to_a_file_outside_the_bundle_is_refused(
    make_bundle: BundleFactory, outside: Path
) -> None:
    folder = make_bundle(manifest(), {"templates/one.json.j2": including("templates/part.j2")}, {"dev": {}})
    (folder / "templates" / "part.j2").symlink_to(outside)
    error = refused(folder)
    assert (error.file, error.line) == ("templates/one.json.j2", 1)
    assert "templates/part.j2 is a symbolic link" in str(error)


def test_a_linked_folder_and_a_linked_connector_template_are_refused(make_bundle: BundleFactory, outside: Path) -> None:
    folder = make_bundle(manifest("linked/one.json.j2"), {}, {"dev": {}})
    (folder / "linked").symlink_to(outside.parent, target_is_directory=True)
    (outside.parent / "one.json.j2").write_text(BODY.replace("text", "env"))  # would render "dev" if read
    error = refused(folder)
    assert error.file == "linked/one.json.j2"
    assert "linked is a symbolic link" in str(error)


def test_another_environments_values_and_the_manifest_are_not_includable(make_bundle: BundleFactory) -> None:
    folder = make_bundle(
        manifest(), {"templates/one.json.j2": including("values/prod.yaml")}, {"dev": {}, "prod": {"pw": SECRET}}
    )
    assert "values/prod.yaml holds environment values" in str(refused(folder))
    (folder / "templates" / "one.json.j2").write_text(including("bundle.yaml"))
    assert "bundle.yaml is the manifest" in str(refused(folder))
    (folder / "templates" / "one.json.j2").write_text(including("../b/values/prod.yaml"))
    refused(folder)  # Jinja's own rule: no ".." in a template name
    (folder / "templates" / "one.json.j2").write_text('{% include "values/" ~ "x" * 100000 %}' + BODY)
    assert len(str(refused(folder))) < 400  # the name is quoted in the error, cut


def test_an_environments_values_file_that_is_a_link_is_refused(make_bundle: BundleFactory, tmp_path: Path) -> None:
    """values/dev.yaml linked to another bundle's prod values would hand them to a dev render."""
    other = tmp_path / "other-prod.yaml"
    other.write_text(f"text: {SECRET}\n")
    folder = make_bundle(manifest(), {"templates/one.json.j2": BODY}, {})
    (folder / "values" / "dev.yaml").symlink_to(other)
    error = refused(folder)
    assert (error.file, error.problem) == ("values/dev.yaml", "values/dev.yaml is a symbolic link")


def test_an_include_of_a_template_file_of_the_bundle_still_works(make_bundle: BundleFactory) -> None:
    folder = make_bundle(
        manifest(), {"templates/one.json.j2": including("templates/part.j2"), "templates/part.j2": "x{{ env }}"},
        {"dev": {}},
    )  # fmt: skip
    [connector] = render_bundle(load_bundle(folder), "dev").connectors
    assert connector.config["file"] == "xdev"


@pytest.mark.parametrize(
    ("expression", "bound"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}", "steps"),
        ("{{ 'x' * 1000000000 }}", "characters"),
        ("{{ ('x' * 1000) * 1000000 }}", "characters"),
        ("{{ ['x'] * 1000000000 }}", "characters"),
        ("{{ ' ' | center(1000000000) }}", "characters"),
        ("{{ ' '.center(1000000000) }}", "characters"),
        ("{{ '%1000000000d' | format(1) }}", "characters"),
        ("{{ '%1000000000d' % 1 }}", "characters"),
        ("{{ 10 ** 10000000 }}", "digits"),
        (MACRO_TWICE + "{{ f(40) }}", "s"),  # steps, or seconds on a very slow machine
        ("{{ lipsum(1000000000) }}", "lipsum"),
        ("{{ [1] | batch(1000000000) | list }}", "characters"),
        ("{% set s = 'x' * 999999 %}{% for i in range(1000) %}{{ s }}{% endfor %}", "characters"),
    ],
)
def test_a_render_is_bounded_in_work_and_size(make_bundle: BundleFactory, expression: str, bound: str) -> None:
    template = "{% set text %}" + expression + "{% endset %}" + BODY
    folder = make_bundle(manifest(), {"templates/one.json.j2": template}, {"dev": {}})
    error = refused(folder)
    assert error.file == "templates/one.json.j2"
    assert bound in str(error), str(error)
    if bound != "lipsum":  # not a function of the sandbox at all
        assert "rendering stopped" in str(error)
        assert error.fix is not None and "loop" in error.fix


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recurses too deep"),
        ("{{ [1, 2] | slice(0) | list }}", "division"),
        ("{% for x in [[1]] recursive %}{{ loop(x) }}{% endfor %}", "recursive"),
    ],
)
def test_recursion_and_index_errors_are_one_line_bundle_errors(
    make_bundle: BundleFactory, expression: str, problem: str
) -> None:
    template = "{% set text %}" + expression + "{% endset %}" + BODY
    folder = make_bundle(manifest(), {"templates/one.json.j2": template}, {"dev": {}})
    error = refused(folder)
    assert error.file == "templates/one.json.j2"
    assert problem in str(error), str(error)
