"""``ikkai bundle export``: a bundle as resources for a cluster's operator, on stdout.

    ikkai bundle export payments-ingest --format strimzi -e prod --cluster-label connect -n kafka | kubectl apply -f -

Renders and lints the bundle as ``apply`` does (offline: no Connect cluster is asked), then prints
one ``KafkaConnector`` per connector (deploy/strimzi.py). Nothing is written anywhere.
"""

from __future__ import annotations

import click

from deploy import bundle_ops, strimzi
from deploy.bundle_ops import BundleRequest

FORMATS = ("strimzi",)


@click.command()
@click.argument("bundle")
@click.option("--format", "format_", type=click.Choice(FORMATS), required=True, help="What to export as.")
@click.option("--env", "-e", default="dev", show_default=True, help="Environment: values/<env>.yaml.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a value (repeatable).")
@click.option(
    "--cluster-label", default=strimzi.DEFAULT_CLUSTER, show_default=True,
    help="Name of the Strimzi KafkaConnect resource that runs the connectors (label strimzi.io/cluster).",
)  # fmt: skip
@click.option("--namespace", "-n", help="metadata.namespace of every resource (default: kubectl's).")
@click.option(
    "--api-version", type=click.Choice(strimzi.API_VERSIONS), default="v1", show_default=True,
    help="kafka.strimzi.io version: v1 for Strimzi 1.x; v1beta2 for operators that do not serve v1.",
)  # fmt: skip
@click.option("--no-auto-restart", is_flag=True, help="spec.autoRestart.enabled=false.")
@click.option("--max-restarts", type=click.IntRange(min=0), help="spec.autoRestart.maxRestarts (default: no limit).")
def export(
    bundle: str, format_: str, env: str, sets: tuple[str, ...], cluster_label: str, namespace: str | None,
    api_version: str, no_auto_restart: bool, max_restarts: int | None,
) -> None:  # fmt: skip
    """Print the bundle's connectors as Kubernetes resources (multi-document YAML), after the policy lint.

    Secrets stay config-provider placeholders: a literal secret is refused, so the output can be committed.
    """
    rendered = bundle_ops.rendered(BundleRequest(bundle=bundle, env=env, overrides=sets))
    target = strimzi.StrimziTarget(
        cluster=cluster_label,
        namespace=namespace,
        api_version=api_version,
        auto_restart=not no_auto_restart,
        max_restarts=max_restarts,
    )
    resources = strimzi.kafka_connectors(rendered, target)
    click.echo(strimzi.to_yaml(resources), nl=False)


__all__ = ["FORMATS", "export"]
