"""The bearer tokens of ``ikkai serve``: where they come from, and which environments each one covers.

One token, from ``$IKKAI_SERVE_TOKEN`` or a token file holding just that token, covers every
environment, as before. A token file may instead scope its tokens, one per line::

    # environments: token
    dev, staging: 3b8f...        (this token may plan/apply/status/restart dev and staging only)
    prod: 9c41...
    *: 77d0...                   (every environment, like a single token)

Blank lines and ``#`` comments are skipped; every token is used once and carries at least ``MIN_BITS``
bits by ``estimated_bits`` (a token of one repeated letter, a word padded with one, is refused where it is
read, before the port is bound; ``openssl rand -hex 24`` makes a good one). ``/metrics`` takes any of the
tokens; a bundle route takes only a token that covers its environment (403 otherwise). Like ssh with a
private key, a token file that its group or others may read is refused, with the ``chmod`` that fixes it.
"""

from __future__ import annotations

import hmac
import math
import re
import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from connectors.manifest import ENVIRONMENT_NAME
from ikkai.errors import ConfigError

TOKEN_VAR = "IKKAI_SERVE_TOKEN"  # noqa: S105 - the variable's name, not a token
MIN_BITS = 128
EVERY = "*"
_SCOPED = re.compile(r"^\s*([a-z0-9*][a-z0-9_*,\s-]*?)\s*:\s*(\S+)\s*$")


@dataclass(frozen=True)
class ServeTokens:
    """Each token with the environments it covers (``*``: all of them)."""

    scopes: tuple[tuple[str, frozenset[str]], ...]

    @classmethod
    def single(cls, token: str) -> ServeTokens:
        return cls(((token, frozenset({EVERY})),))

    def environments(self, supplied: str) -> frozenset[str] | None:
        """The environments ``supplied`` covers; None when it is no token of ours. Constant time per token."""
        found = None
        for token, envs in self.scopes:
            if hmac.compare_digest(supplied.encode(), token.encode()):
                found = envs
        return found

    @staticmethod
    def covers(environments: frozenset[str], env: str) -> bool:
        return EVERY in environments or env in environments

    def reach(self, env: str) -> bool:
        """Whether any token covers ``env``: an environment no token reaches is never read by the service."""
        return any(self.covers(envs, env) for _, envs in self.scopes)


def estimated_bits(token: str) -> float:
    """The token's length times the Shannon entropy of its characters (as often as each occurs): 0 for one
    repeated letter, about 180 for ``openssl rand -hex 24``. It counts how varied the characters are, not how
    they were made, so it refuses the repeated and the padded but cannot tell a pattern from chance; it never
    counts more than a random token of the same length over the same characters carries."""
    counts = Counter(token)
    return -sum(n * math.log2(n / len(token)) for n in counts.values()) if token else 0.0


def _weak(where: str, token: str) -> ConfigError | None:
    """A refusal when ``token`` is missing or estimated under ``MIN_BITS`` bits; never quotes it."""
    bits = estimated_bits(token)
    if bits >= MIN_BITS:
        return None
    why = "missing" if not token else f"about {bits:.0f} bits by the variety of its characters, under {MIN_BITS} bits"
    return ConfigError(
        where, "token", why, fix="make a random one, e.g. export IKKAI_SERVE_TOKEN=$(openssl rand -hex 24)"
    )


def read_token_file(path: Path) -> str:
    """The file's text, once it is known that only its owner may read it (as ssh checks a key)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), "token file", f"cannot be read: {exc.strerror}") from exc
    if mode & 0o077:
        raise ConfigError(
            str(path), "token file", f"permissions {mode:04o} are too open: group or others may read it",
            fix=f"chmod 600 {path}",
        )  # fmt: skip
    return text


def read_token(env: Mapping[str, str], token_file: Path | None) -> str:
    """One token for every environment: the whole token file, or ``$IKKAI_SERVE_TOKEN``."""
    token = read_token_file(token_file).strip() if token_file else env.get(TOKEN_VAR, "").strip()
    weak = _weak(str(token_file) if token_file else f"${TOKEN_VAR}", token)
    if weak is not None:
        raise weak
    return token


def read_tokens(env: Mapping[str, str], token_file: Path | None) -> ServeTokens:
    """The tokens of ``token_file`` (one token, or ``environments: token`` lines), else ``$IKKAI_SERVE_TOKEN``."""
    if token_file is None:
        return ServeTokens.single(read_token(env, None))
    lines = [
        (number, line.strip())
        for number, line in enumerate(read_token_file(token_file).splitlines(), 1)
        if line.strip() and not line.strip().startswith("#")
    ]
    if len(lines) == 1 and ":" not in lines[0][1]:
        return ServeTokens.single(read_token(env, token_file))
    scopes: list[tuple[str, frozenset[str]]] = []
    for number, line in lines:
        where = f"{token_file} line {number}"
        match = _SCOPED.match(line)
        envs = frozenset(e.strip() for e in match.group(1).split(",")) if match else frozenset()
        if match is None or not envs or not all(e == "*" or ENVIRONMENT_NAME.match(e) for e in envs):
            raise ConfigError(where, "token", "not 'environments: token'", fix="e.g. 'dev, staging: <token>'")
        token = match.group(2)
        weak = _weak(where, token)
        if weak is not None:
            raise weak
        if any(token == known for known, _ in scopes):
            raise ConfigError(where, "token", "used on an earlier line too", fix="give each line its own token")
        scopes.append((token, envs))
    if not scopes:
        raise ConfigError(str(token_file), "token", "missing", fix="write a token, e.g. $(openssl rand -hex 24)")
    return ServeTokens(tuple(scopes))
