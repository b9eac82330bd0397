"""What the login form carries besides the token: where to go after it, and the name the page's applies record.

``landing(next)`` is where a successful login lands: ``next`` when it is a path of this page (``/ui/…``: no
scheme, no host, no backslash, no ``..``, no control character, at most ``NEXT_MAX`` characters), else the
page's home; never another site (no open redirect). A view the login interrupted sends its own path as
``next``, so the flow URL ``make demo`` prints lands on the flow view.

``applier(name)`` is who the record of an apply from the page names (``deploy.applies``): the name typed at the
login, cut to ``NAME_MAX`` printable characters, with ``(page)``; the token is what was checked, the name is
as given. Without one: ``ikkai serve page``. Pure.
"""

from __future__ import annotations

from urllib.parse import urlsplit

HOME = "/ui/"
NEXT_MAX = 300
NAME_MAX = 60
NAMELESS = "ikkai serve page"


def landing(next_path: str | None) -> str:
    """``next_path`` when it is a local path of the page, else ``HOME``."""
    if not next_path or len(next_path) > NEXT_MAX or not next_path.startswith(HOME):
        return HOME
    if "\\" in next_path or ".." in next_path or any(ord(c) < 0x20 or ord(c) == 0x7F for c in next_path):
        return HOME
    parts = urlsplit(next_path)
    if parts.scheme or parts.netloc or parts.fragment:
        return HOME
    return next_path


def shown_name(name: str | None) -> str:
    """The login's name as kept: printable characters only, spaces folded, at most ``NAME_MAX``."""
    printable = "".join(c if c.isprintable() else " " for c in name or "")
    return " ".join(printable.split())[:NAME_MAX]


def applier(name: str | None) -> str:
    """Who an apply from the page is recorded as: ``<name> (page)``, or ``NAMELESS``."""
    kept = shown_name(name)
    return f"{kept} (page)" if kept else NAMELESS
