"""The operator page of ``ikkai serve`` under ``/ui/``: bundles, connectors, flow and health per environment, behind
a login.

``app`` holds the routes (Starlette, Jinja2 templates shipped in this package), ``session`` the login and CSRF rules,
``views`` the pure shaping of the control plane's data into rows and ``charts`` the pictures (pygal SVG),
``connector_table`` the connectors view's table of one environment, ``access`` the check of each route (a login
that covers the environment, the CSRF token of an action), ``environment_readers`` the readers and tables kept per
environment; the flow's offsets are read by ``deploy.eos_view.flow``, the health view's markers, lag, dead letters
and reconciliation by ``deploy.eos_view.health`` and the readers it calls.
"""

from deploy.serve.page.app import REFRESH_SECONDS, page_app

__all__ = ["REFRESH_SECONDS", "page_app"]
