"""The operator page of ``ikkai serve`` under ``/ui/``: bundles, connectors, flow and health per environment, behind
a login.

``deploy.page.app`` holds the routes (Starlette, Jinja2 templates shipped in this package), ``deploy.page.session``
the login and CSRF rules, ``deploy.page.views`` the pure shaping of the control plane's data into rows and
``deploy.page.charts`` the pictures (pygal SVG); the flow's offsets are read by ``deploy.flow``, the health view's
markers, lag, dead letters and reconciliation by ``deploy.eos_health`` and the readers it calls.
"""

from deploy.page.app import REFRESH_SECONDS, page_app

__all__ = ["REFRESH_SECONDS", "page_app"]
