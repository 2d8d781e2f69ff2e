"""The test project served by a real ``runserver``, reached over HTTP as a browser does."""

from __future__ import annotations

import http.cookiejar
import socket
import urllib.error
import urllib.parse
import urllib.request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Browser:
    """Cookies, and the CSRF token Django's forms need, over urllib."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def get(self, path: str) -> tuple[int, str]:
        with self.opener.open(self.base + path, timeout=20) as response:
            return response.status, response.read().decode()

    def post(self, path: str, data: dict[str, str]) -> tuple[int, str]:
        token = next((c.value for c in self.cookies if c.name == "csrftoken"), "")
        body = urllib.parse.urlencode({**data, "csrfmiddlewaretoken": token}).encode()
        request = urllib.request.Request(  # noqa: S310 - 127.0.0.1 only
            self.base + path, data=body, headers={"Referer": self.base + path}
        )
        try:
            with self.opener.open(request, timeout=20) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def up(self) -> bool:
        """The site answers (its login page, which sets the CSRF cookie)."""
        try:
            return self.get("/admin/login/")[0] == 200
        except OSError:
            return False
