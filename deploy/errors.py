"""Errors of the control plane: operating the connectors of a Connect cluster."""

from __future__ import annotations

import difflib

from ikkai.errors import IkkaiError


class ConnectorNotFound(IkkaiError):
    """A command named a connector the Connect cluster does not have."""

    def __init__(self, connector: str, connect_url: str, known: list[str]) -> None:
        close = difflib.get_close_matches(connector, known, n=1)
        listing = ", ".join(known[:10]) + (f" (and {len(known) - 10} more)" if len(known) > 10 else "")
        super().__init__(
            f"connector {connector} does not exist on {connect_url}",
            fix=(f"did you mean {close[0]}? " if close else "")
            + (f"connectors there: {listing}" if known else "that cluster has no connectors"),
        )
        self.connector = connector
        self.connect_url = connect_url
        self.known = known


class ConnectorStateError(IkkaiError):
    """A connector did not reach the state an operation needs (offsets change only while STOPPED)."""

    def __init__(self, connector: str, state: str, wanted: str, problem: str, fix: str) -> None:
        super().__init__(f"connector {connector} is {state}, not {wanted}: {problem}", fix=fix)
        self.connector = connector
        self.state = state
        self.wanted = wanted
        self.problem = problem
