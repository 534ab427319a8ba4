"""A small Scrapyd API client (urllib only), job log tails and the project's egg.

A node is its URL; HTTP basic auth (Scrapyd's ``username``/``password``)
rides in it as ``http://user:password@host:6800/`` (:func:`with_credentials`
puts a scrapy.cfg target's there) and goes out as an ``Authorization``
header; :func:`shown` is the URL without them, for every message.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any


class NodeError(Exception):
    """A Scrapyd node could not be reached or refused a call."""


def with_credentials(url: str, username: str, password: str) -> str:
    """``url`` carrying HTTP basic auth credentials (quoted)."""
    parts = urllib.parse.urlsplit(url)
    userinfo = urllib.parse.quote(username, safe="") + ":" + urllib.parse.quote(password, safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc.rpartition('@')[2]}"))


def _split(node: str) -> tuple[str, dict[str, str]]:
    """The node's URL without credentials, and the headers that carry them."""
    parts = urllib.parse.urlsplit(node)
    if "@" not in parts.netloc:
        return node, {}
    userinfo, _, host = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    token = f"{urllib.parse.unquote(username)}:{urllib.parse.unquote(password)}".encode()
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return bare, {"Authorization": "Basic " + base64.b64encode(token).decode()}


def shown(node: str) -> str:
    """The node as messages name it: its URL without credentials."""
    return _split(node)[0]


def call(node: str, endpoint: str, data: dict[str, Any] | list[tuple[str, str]] | None = None,
         files: dict[str, tuple[str, bytes]] | None = None, timeout: float = 30) -> dict[str, Any]:
    base, headers = _split(node)
    node = base
    url = base.rstrip("/") + "/" + endpoint
    body: bytes | None = None
    if files:
        boundary = uuid.uuid4().hex
        parts = []
        for key, value in (data.items() if isinstance(data, dict) else data or []):
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode())
        for key, (filename, content) in files.items():
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"; filename="{filename}"\r\n'
                         f"Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n")
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
    elif data is not None:
        body = urllib.parse.urlencode(data, doseq=True).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=timeout) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise NodeError(f"{node}: HTTP {exc.code} from {endpoint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise NodeError(f"{node}: unreachable ({reason})") from None
    except ValueError:
        raise NodeError(f"{node}: {endpoint} did not answer JSON (is it Scrapyd?)") from None
    if answer.get("status") != "ok":
        raise NodeError(f"{node}: {endpoint} refused: {answer.get('message', answer)}")
    return answer


def fetch_tail(node: str, path: str, size: int = 65536, timeout: float = 30) -> str | None:
    """The last ``size`` bytes of the file Scrapyd serves at ``path`` (a job's
    ``log_url``); None when the node has no such file (Scrapyd deletes logs
    beyond ``jobs_to_keep``). The length comes from a HEAD request and the
    tail from an explicit ``Range``: Twisted answers a suffix range longer
    than the file with HTTP 500."""
    node, auth = _split(node)
    url = node.rstrip("/") + "/" + path.lstrip("/")
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD", headers=auth),
                                    timeout=timeout) as resp:
            length = int(resp.headers.get("Content-Length") or 0)
        if length == 0:
            return ""
        request = urllib.request.Request(url, headers={**auth, "Range": f"bytes={max(0, length - size)}-"})
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise NodeError(f"{node}: HTTP {exc.code} from {path}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise NodeError(f"{node}: unreachable ({getattr(exc, 'reason', exc)})") from None
    return body[-size:].decode("utf-8", errors="replace")


def build_egg(project_dir: Path) -> bytes:
    """``setup.py bdist_egg`` of the project, as scrapyd-deploy builds it."""
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as build:
        result = subprocess.run(
            [sys.executable, "setup.py", "-q", "build", "--build-base", build, "bdist_egg", "-d", out],
            cwd=project_dir, capture_output=True, text=True, check=False,
        )
        eggs = list(Path(out).glob("*.egg"))
        if result.returncode != 0 or not eggs:
            raise NodeError(f"building the egg failed: {result.stderr.strip()[-500:]}")
        return eggs[0].read_bytes()
