"""Connector bundles: manifest + Jinja2 templates + per-environment values, rendering and policy lint.

Built by the control-plane issue (#3); empty until then.
"""
