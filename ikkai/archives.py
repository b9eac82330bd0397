"""Deterministic zip archives: the same entries give the same bytes, whenever and wherever they are built.

Entries are sorted by name and carry zip's earliest timestamp and one file mode, so nothing of the
build (time, umask, file order on disk) reaches the archive and its content hash names it stably.
Used by the job's application zip (spark_jobs.shipping) and the Connect plugin archives
(stack.local_plugins).
"""

from __future__ import annotations

import io
import zipfile

EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest timestamp: entries carry no build time


def deterministic_zip(entries: list[tuple[str, bytes]]) -> bytes:
    """A deflated zip of ``(name, content)`` pairs, sorted by name, every entry dated ``EPOCH`` with mode 0644."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    return buffer.getvalue()
