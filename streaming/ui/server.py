"""The status page's HTTP server (stdlib ``http.server`` in a daemon thread, like the metrics
endpoint beside it on the driver).

Routes (GET/HEAD only; the page never changes anything):

``/``                       overview (HTML)
``/api/state``              overview data + its HTML fragment (JSON; ``?html=0`` without it)
``/finding/<key64>``        one finding (``key64`` = :func:`streaming.ui.store.encode_key`);
                            ``/finding?key=<raw key>`` works too, for links built from an alert
``/api/finding/<key64>``    one finding's data + HTML fragment (JSON)
``/static/app.js``, ``/static/style.css``
``/healthz``                ``ok`` (no auth: for load balancers; says nothing about findings)

Safe by default: binds to 127.0.0.1 unless configured; optional HTTP basic auth and/or a bearer
token (``Authorization: Bearer``, or ``?token=`` once, which sets an HttpOnly cookie and
redirects to the same URL without it); a Content-Security-Policy that allows only this
origin's script and style.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import os
import socket
import threading
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from streaming.config import UiConfig
from streaming.ui import render
from streaming.ui.store import FindingStore, decode_key

log = logging.getLogger("txnwatch")

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
STATIC_TYPES = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
TOKEN_COOKIE = "txnwatch_token"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _static_files() -> dict[str, bytes]:
    out = {}
    for name in STATIC_TYPES:
        with open(os.path.join(STATIC_DIR, name), "rb") as f:
            out[name] = f.read()
    return out


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "txnwatch-ui"
    sys_version = ""

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: access lines at debug level only
        log.debug("ui: %s %s", self.address_string(), fmt % args)

    # -- plumbing --------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _html(self, status: int, text: str) -> None:
        self._send(status, text.encode("utf-8"), "text/html; charset=utf-8")

    def _json(self, status: int, text: str) -> None:
        self._send(status, text.encode("utf-8"), "application/json")

    def _authorized(self, query: dict[str, list[str]]) -> bool | str:
        """True, False, or a redirect target (a valid ``?token=`` to turn into a cookie)."""
        s = self.server.settings
        if not s.auth_required:
            return True
        header = self.headers.get("Authorization") or ""
        scheme, _, cred = header.partition(" ")
        if s.token:
            if scheme.lower() == "bearer" and hmac.compare_digest(cred.strip().encode(), s.token.encode()):
                return True
            cookie = SimpleCookie(self.headers.get("Cookie") or "")
            if TOKEN_COOKIE in cookie and hmac.compare_digest(cookie[TOKEN_COOKIE].value.encode(), s.token.encode()):
                return True
            given = (query.get("token") or [""])[0]
            if given and hmac.compare_digest(given.encode(), s.token.encode()):
                return "redirect"
        if s.basic_user and scheme.lower() == "basic":
            try:
                user, _, pw = base64.b64decode(cred.strip()).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            if hmac.compare_digest(user.encode(), s.basic_user.encode()) and \
                    hmac.compare_digest(pw.encode(), s.basic_password.encode()):
                return True
        return False

    def _deny(self) -> None:
        extra = {"WWW-Authenticate": 'Basic realm="txnwatch", charset="UTF-8"'} if self.server.settings.basic_user \
            else {"WWW-Authenticate": 'Bearer realm="txnwatch"'}
        self._send(HTTPStatus.UNAUTHORIZED, b"authentication required\n", "text/plain; charset=utf-8", extra)

    # -- routes ----------------------------------------------------------------------------
    def do_HEAD(self) -> None:  # http.server naming
        self.do_GET()

    def do_GET(self) -> None:
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:  # one bad request must not stop the server
            log.exception("ui: error serving %s", self.path)
            try:
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error (see the txnwatch log)\n",
                           "text/plain; charset=utf-8")
            except OSError:
                pass

    def _not_allowed(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only\n", "text/plain; charset=utf-8", {"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

    def _route(self) -> None:
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        if path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
            return
        if path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
            return
        auth = self._authorized(query)
        if auth == "redirect":
            rest = {k: v for k, v in query.items() if k != "token"}
            target = path + ("?" + urlencode(rest, doseq=True) if rest else "")
            cookie = f"{TOKEN_COOKIE}={self.server.settings.token}; HttpOnly; SameSite=Strict; Path=/"
            self._send(HTTPStatus.SEE_OTHER, b"", "text/plain", {"Location": target, "Set-Cookie": cookie})
            return
        if not auth:
            self._deny()
            return
        store = self.server.store
        if path == "/":
            self._html(HTTPStatus.OK, render.overview_page(store.snapshot()))
        elif path == "/api/state":
            with_html = (query.get("html") or ["1"])[0] != "0"
            self._json(HTTPStatus.OK, render.overview_json(store.snapshot(), with_html=with_html))
        elif path.startswith("/static/") and path[len("/static/"):] in self.server.static:
            name = path[len("/static/"):]
            self._send(HTTPStatus.OK, self.server.static[name], STATIC_TYPES[name])
        elif path in ("/finding", "/api/finding") or path.startswith(("/finding/", "/api/finding/")):
            self._finding(path, query)
        else:
            self._html(HTTPStatus.NOT_FOUND, render.not_found_page(f"No page at {path}."))

    def _finding(self, path: str, query: dict[str, list[str]]) -> None:
        api = path.startswith("/api/")
        token = path.rpartition("/")[2] if path.count("/") >= (3 if api else 2) else ""
        key = decode_key(token) if token else (query.get("key") or [None])[0]
        doc = self.server.store.finding(key) if key else None
        if doc is None:
            what = f"No open finding, nor one resolved in the last 24 hours, with key {key!r}." if key \
                else "No finding key in the address."
            if api:
                self._json(HTTPStatus.NOT_FOUND, json.dumps({"error": what}))
            else:
                self._html(HTTPStatus.NOT_FOUND, render.not_found_page(what))
            return
        if api:
            self._json(HTTPStatus.OK, render.finding_json(doc))
        else:
            self._html(HTTPStatus.OK, render.finding_page(doc))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], store: FindingStore, settings: UiConfig) -> None:
        self.store = store
        self.settings = settings
        self.static = _static_files()
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)


class UIServer:
    """Serve ``store`` on ``settings.bind:settings.port`` (``port=0`` picks a free one; ``.port``)."""

    def __init__(self, store: FindingStore, settings: UiConfig) -> None:
        self.store = store
        self.settings = settings
        self._server = _Server((settings.bind, settings.port), store, settings)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="txnwatch-ui", daemon=True)
        self._thread.start()
        if not settings.auth_required and settings.bind not in ("127.0.0.1", "localhost", "::1"):
            log.warning("status page bound to %s without authentication: set ui.basic_user/basic_password "
                        "or ui.token", settings.bind)

    @property
    def url(self) -> str:
        host = self.settings.bind if self.settings.bind not in ("0.0.0.0", "::") else "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> UIServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
