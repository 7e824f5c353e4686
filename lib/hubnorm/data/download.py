"""A resumable HTTP(S) downloader for pooch.

pooch (the checksum and caching layer) streams every download into a fresh temporary file, so an interrupted
download restarts from byte 0. :class:`ResumableHTTPDownloader` is a pooch downloader (``downloader=`` of
``pooch.retrieve``) that instead keeps a stable partial file next to the final destination::

    <final>.part         the bytes received so far
    <final>.part.json    {"url", "etag", "last_modified", "total"} of the response those bytes came from

and continues it with an HTTP ``Range: bytes=<size>-`` request (plus ``If-Range``). The answer decides:

- ``206`` with the same validator (ETag / Last-Modified) and ``Content-Range`` starting at ``<size>``: append;
- ``200`` (the server ignores ``Range``, or ``If-Range`` saw a changed file): start again from byte 0;
- ``206`` with another validator or another start: drop the partial and ask again without ``Range``;
- ``416`` with ``Content-Range: bytes */<size>``: the partial is already complete.

When every byte is there it is hard-linked (moved where links are impossible) onto pooch's temporary
``output_file``; pooch then checks the checksum and moves the file into place. The caller removes the partial
afterwards, after success and after a checksum failure alike (:func:`discard_partial`), so a corrupt partial
is never reused. A connection that drops leaves the partial (and raises :class:`IncompleteDownload`, a
``requests`` exception) for the next call to resume.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Optional, Tuple

import requests
import urllib3

DEFAULT_TIMEOUT = 30
CHUNK_SIZE = 1 << 20


class IncompleteDownload(requests.exceptions.ConnectionError):
    """The connection ended before every byte arrived; the partial file is kept so the next try resumes."""


def partial_paths(target) -> Tuple[Path, Path]:
    """``(<target>.part, <target>.part.json)``."""
    target = Path(target)
    return target.with_name(target.name + ".part"), target.with_name(target.name + ".part.json")


def discard_partial(target) -> None:
    """Delete ``target``'s partial download (data and metadata), if any."""
    for p in partial_paths(target):
        p.unlink(missing_ok=True)


def _validators(headers) -> dict:
    return {"etag": headers.get("ETag"), "last_modified": headers.get("Last-Modified")}


def _same_file(meta: dict, headers) -> bool:
    """Whether a response describes the file whose first bytes the partial holds."""
    new = _validators(headers)
    if meta.get("etag") or new["etag"]:
        return meta.get("etag") == new["etag"]
    if meta.get("last_modified") or new["last_modified"]:
        return meta.get("last_modified") == new["last_modified"]
    return True  # no validator at all: only the size can be compared (done by the caller)


def _content_range(headers) -> Tuple[Optional[int], Optional[int]]:
    """``(start, total)`` of a ``Content-Range: bytes start-end/total`` (or ``bytes */total``) header."""
    value = headers.get("Content-Range", "")
    try:
        unit, _, spec = value.strip().partition(" ")
        rng, _, total = spec.partition("/")
        start = None if rng == "*" else int(rng.split("-")[0])
        return start, (None if total in ("", "*") else int(total))
    except ValueError:
        return None, None


class ResumableHTTPDownloader:
    """pooch downloader that resumes ``<target>.part`` with HTTP range requests (see the module docstring).

    Args:
        target: the final destination (``pooch.retrieve``'s ``path / fname``); the partial lives next to it.
        progressbar: show a tqdm progress bar (bytes, starting at the resumed offset).
        chunk_size: bytes per read.
        timeout: seconds for connecting and between reads.
    """

    def __init__(self, target, *, progressbar: bool = False, chunk_size: int = CHUNK_SIZE,
                 timeout: float = DEFAULT_TIMEOUT):
        self.target = Path(target)
        self.part, self.meta_path = partial_paths(self.target)
        self.progressbar = bool(progressbar)
        self.chunk_size = int(chunk_size)
        self.timeout = timeout

    # ------------------------------------------------------------------ pooch downloader protocol
    def __call__(self, url, output_file, pooch, check_only=False):  # noqa: ARG002 (pooch's signature)
        if check_only:
            response = requests.head(url, timeout=self.timeout, allow_redirects=True)
            return bool(response.status_code == 200)
        self.download(url)
        self._hand_over(output_file)
        return None

    # ------------------------------------------------------------------ internals
    def _read_meta(self, url: str) -> Optional[dict]:
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) and meta.get("url") == url else None

    def _write_meta(self, meta: dict) -> None:
        tmp = self.meta_path.with_name(self.meta_path.name + ".tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, self.meta_path)

    def download(self, url: str) -> Path:
        """Complete ``<target>.part`` from ``url`` (resuming what is there) and return its path."""
        self.target.parent.mkdir(parents=True, exist_ok=True)
        meta = self._read_meta(url) if self.part.exists() else None
        if meta is None:  # no partial, or one without (matching) metadata: nothing can be trusted
            discard_partial(self.target)
        for _attempt in range(3):  # resume; at most one fresh restart after a changed file; one spare
            offset = self.part.stat().st_size if meta is not None and self.part.exists() else 0
            headers = {"Accept-Encoding": "identity"}  # byte offsets must refer to the file, not a gzip stream
            if offset > 0:
                headers["Range"] = f"bytes={offset}-"
                etag = meta.get("etag")
                validator = etag if etag and not etag.startswith("W/") else meta.get("last_modified")
                if validator:
                    headers["If-Range"] = validator
            with requests.get(url, headers=headers, stream=True, timeout=self.timeout) as response:
                status = response.status_code
                if offset > 0 and status == 416:
                    _, total = _content_range(response.headers)
                    if total is not None and total == offset and meta.get("total") in (None, offset):
                        return self.part  # already complete
                    discard_partial(self.target)
                    meta = None
                    continue
                response.raise_for_status()
                if status == 206:
                    start, total = _content_range(response.headers)
                    if (offset == 0 or start != offset or not _same_file(meta, response.headers)
                            or (meta.get("total") is not None and total != meta["total"])):
                        discard_partial(self.target)  # another file, or a range we did not ask for
                        meta = None
                        continue
                    mode = "ab"
                else:  # 200: the whole file (Range ignored, or If-Range saw a new version)
                    offset, mode = 0, "wb"
                    length = response.headers.get("Content-Length")
                    total = int(length) if length and length.isdigit() else None
                    meta = {"url": url, **_validators(response.headers), "total": total}
                    discard_partial(self.target)
                    self._write_meta(meta)
                self._stream(response, mode, offset, meta.get("total"), url)
            return self.part
        raise IncompleteDownload(f"could not resume {url}: the server kept answering with another file or range")

    def _stream(self, response, mode: str, offset: int, total: Optional[int], url: str) -> None:
        from tqdm.auto import tqdm

        got = offset
        raw_read1 = getattr(response.raw, "read1", None)  # urllib3 >= 2: whatever has arrived, up to chunk_size
        chunks = None if raw_read1 is not None else response.iter_content(chunk_size=self.chunk_size)
        bar = tqdm(total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, ncols=79,
                   ascii=sys.platform == "win32", desc=self.target.name, disable=not self.progressbar)
        try:
            with open(self.part, mode) as fh:
                while True:
                    try:  # read1 rather than iter_content: a full-size read that fails loses what it had read
                        chunk = (raw_read1(self.chunk_size, decode_content=False) if chunks is None
                                 else next(chunks, b""))
                    except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                        fh.flush()
                        raise IncompleteDownload(f"connection to {url} ended after {got} of {total or '?'} bytes "
                                                 f"({exc}); {self.part} is kept, so a rerun resumes") from exc
                    if not chunk:
                        break
                    fh.write(chunk)
                    got += len(chunk)
                    bar.update(len(chunk))
        finally:
            bar.close()
        if total is not None and got != total:
            if got > total:  # more than announced: nothing about this partial can be trusted
                discard_partial(self.target)
            raise IncompleteDownload(f"connection to {url} ended after {got} of {total} bytes; "
                                     f"{self.part} is kept, so a rerun resumes")

    def _hand_over(self, output_file) -> None:
        """Put the completed partial at pooch's ``output_file`` (path or open file) for the checksum check."""
        if hasattr(output_file, "write"):
            with open(self.part, "rb") as src:
                shutil.copyfileobj(src, output_file, self.chunk_size)
            return
        out = Path(output_file)
        link = out.with_name(out.name + ".link")
        try:
            os.link(self.part, link)  # same folder: no copy, and the partial survives until it is verified
            os.replace(link, out)
        except OSError:
            link.unlink(missing_ok=True)
            os.replace(self.part, out)  # no hard links here: move (a rerun would then download again)
            self.meta_path.unlink(missing_ok=True)


__all__ = ["ResumableHTTPDownloader", "IncompleteDownload", "discard_partial", "partial_paths"]
