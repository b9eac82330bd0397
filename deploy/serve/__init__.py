"""``ikkai serve``: the bundle operations over HTTP for automation, the reconcile loop, and the operator page.

``service`` holds what the routes do (``ControlPlane``) and the reconcile loop, ``app`` maps HTTP onto it (Starlette:
the bearer token, the size limits, the request metrics), ``http`` is the server (uvicorn, with its timeouts and
limits), ``tokens`` the bearer tokens and the environments each covers, ``metrics`` what is counted and its
Prometheus rendering, and ``page/`` the operator page under ``/ui/``. It stands on the Connect control plane
(``deploy.bundle_ops`` and below) and on the page's Kafka readers (``deploy.eos_view``); neither imports it.
"""
