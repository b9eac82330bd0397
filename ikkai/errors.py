"""The root of every error ikkai raises on purpose.

Each failure kind is a subclass with structured fields; ``str(error)`` renders them as one
line that says what went wrong, where, and what to do. Callers branch on the class and
its fields, never on the message text. The CLI turns any ``IkkaiError`` into that line
on stderr and exit code 1 (cli/app.py).
"""

from __future__ import annotations


class IkkaiError(Exception):
    """Base class. ``fix`` is the "what to do" part of the message, when there is one."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message}: {self.fix}" if self.fix else self.message

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its class and fields, not its constructor's arguments (every subclass's differ).

        An error raised in a Spark task or a driver-side Python worker crosses to the job's driver
        as itself, its structured fields intact (``spark_jobs.sink.stream_writer``).
        """
        return (_rebuilt, (type(self), dict(self.__dict__)))


def _rebuilt(kind: type[IkkaiError], fields: dict[str, object]) -> IkkaiError:
    error = Exception.__new__(kind)
    Exception.__init__(error, fields.get("message"))
    error.__dict__.update(fields)
    return error


class PrerequisiteError(IkkaiError):
    """A tool ikkai needs on this machine is missing or too old (java, mvn, python)."""

    def __init__(self, tool: str, problem: str, fix: str) -> None:
        super().__init__(f"{tool}: {problem}", fix=fix)
        self.tool = tool
        self.problem = problem


class ConfigError(IkkaiError):
    """A setting is missing, unknown or malformed. ``source`` says where it came from."""

    def __init__(self, source: str, key: str, problem: str, fix: str | None = None) -> None:
        super().__init__(f"{source}: {key}: {problem}", fix=fix)
        self.source = source
        self.key = key
        self.problem = problem


class KafkaAccessError(IkkaiError):
    """The Kafka cluster cannot be reached, or refuses this client's login or TLS handshake.

    ``reason`` is ``authentication``, ``tls``, ``protocol`` (the listener speaks another security
    protocol) or ``unreachable``; ``as_whom`` describes the client's settings without their secrets.
    """

    def __init__(self, bootstrap: str, reason: str, as_whom: str, detail: str, fix: str) -> None:
        what = {
            "authentication": "authentication failed", "tls": "TLS handshake failed",
            "protocol": "the connection is refused",
        }.get(reason, "no answer")  # fmt: skip
        super().__init__(f"kafka {bootstrap}: {what} as {as_whom}: {detail}", fix=fix)
        self.bootstrap = bootstrap
        self.reason = reason
