"""A small typed client for the files API, the one the notebooks use.

>>> files = FilesClient("http://127.0.0.1:8765", token, "a1")      # doctest: +SKIP
>>> version = files.write("/memories/AGENTS.md", "Answer in French.")  # doctest: +SKIP
>>> files.read("/memories/AGENTS.md")                              # doctest: +SKIP
'Answer in French.'

Every refusal raises :class:`ApiError` with the HTTP status and the server's message, which
names the rule (``403 ... only an owner or admin may write there``).

Listings come in pages: :meth:`FilesClient.ls` and :meth:`FilesClient.glob` return one page (a
list with ``next_cursor``); :meth:`FilesClient.iter_ls` and :meth:`FilesClient.iter_glob`
follow the cursors, one bounded request at a time.

It speaks HTTP/1.1 over one kept-alive connection with the standard library's ``http.client``:
httpx cost about 0.4 ms of CPU per request on loopback, as much as the server's whole answer
to a GET (``bench/files_api.py``), and this client needs none of what it adds.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from hango.agents import AgentConfig
from hango.db import readable
from hango.fs.backend import Page


class ApiError(Exception):
    """The files API refused a request: ``status`` is the HTTP status, ``message`` says why."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = body  # the whole JSON error (a 409 conflict carries the fresh diff)


class Unreachable(ConnectionError):
    """No answer from the files API: it refused the connection, closed it, or did not answer
    within the client's timeout. The message names the address."""


@dataclass(frozen=True)
class Response:
    """An answer of the files API: status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    content: bytes
    reason: str = ""

    def json(self) -> Any:
        return json.loads(self.content)


class _Connection:
    """One kept-alive HTTP/1.1 connection to ``base_url``, opened again when the server has
    closed it (an idle connection with something to read has been closed: uvicorn closes them
    after 5 s of silence). One request at a time: threads sharing a client take turns."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be http://host[:port] or https://..., "
                             f"not {base_url!r}")
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        self.address = f"{url.scheme}://{url.netloc}"
        self.prefix = url.path.rstrip("/")
        self.headers = headers
        self.conn = kind(url.hostname, url.port, timeout=timeout)
        self.lock = threading.Lock()

    def request(self, method: str, target: str, body: bytes | None,
                headers: dict[str, str]) -> Response:
        """One request and its whole answer. ``http.client`` sends the head and a body in one
        write (so Nagle's algorithm never holds a part back) and opens a closed connection."""
        with self.lock:
            if self.conn.sock is not None and readable(self.conn.sock.fileno()):
                self.conn.close()  # closed by the server while idle
            try:
                try:
                    self.conn.request(method, self.prefix + target, body,
                                      {**self.headers, **headers})
                except OSError:
                    if self.conn.sock is None:
                        raise  # no connection at all
                    # The server may have answered before the whole body was sent (413 over
                    # the body limit, 401) and closed the connection: read that answer.
                answer = self.conn.getresponse()
                content = answer.read()
            except (OSError, http.client.HTTPException) as exc:
                self.conn.close()
                raise Unreachable(f"no answer from {self.address}: "
                                  f"{exc or type(exc).__name__}") from exc
        return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()},
                        content, answer.reason)

    def close(self) -> None:
        with self.lock:
            self.conn.close()


@dataclass(frozen=True)
class Entry:
    """One line of a listing: a file (with size and version) or a directory (ends with /)."""

    path: str
    is_dir: bool
    size: int
    version: int


def _segment(text: str) -> str:
    # A client that resolves URLs (browsers, httpx) would drop a literal "." or ".." segment
    # before sending it; the server must see it, and refuse it, so dots that form a whole
    # segment are percent-encoded (a path means the same with any client).
    if text in (".", ".."):
        return text.replace(".", "%2E")
    return quote(text, safe="")


class FilesClient:
    """One agent's files and config, as one tenant's principal (the token decides which)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        agent_id: str,
        timeout: float = 10.0,
    ) -> None:
        self.agent_id = agent_id
        self._http = _Connection(base_url, {"Authorization": f"Bearer {token}"}, timeout)
        self._agent = f"/v1/agents/{quote(agent_id, safe='')}"

    def _file(self, path: str, under: str = "files") -> str:
        if not path.startswith("/"):
            # Over HTTP every path is absolute (it follows /files/), so refuse here what
            # clean() would refuse, rather than quietly adding the slash.
            raise ApiError(422, f"invalid path {path!r}: must be absolute (start with /)")
        return f"{self._agent}/{under}/" + "/".join(_segment(s) for s in path[1:].split("/"))

    def _send(self, method: str, url: str, *, content: bytes | None = None,
              json_body: Any = None, params: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None) -> Response:
        """One request; :class:`ApiError` unless 2xx, :class:`Unreachable` if no answer."""
        headers = dict(headers or {})
        if json_body is not None:
            content = json.dumps(json_body, ensure_ascii=False, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        if params:
            url += "?" + urlencode(params)
        response = self._http.request(method, url, content, headers)
        if 200 <= response.status < 300:
            return response
        body: Any = None
        try:
            body = response.json()
            message = str(body["detail"])
        except (ValueError, KeyError, TypeError):
            message = response.content.decode("utf-8", "replace") or response.reason
        raise ApiError(response.status, message, body)

    @staticmethod
    def _precondition(if_version: int | None) -> dict[str, str]:
        if if_version is None:
            return {}
        if if_version == 0:
            return {"If-None-Match": "*"}
        return {"If-Match": f'"{if_version}"'}

    @staticmethod
    def _version(response: Response) -> int:
        return int(response.headers["etag"].strip('"'))

    # files

    def read(self, path: str) -> str:
        """The file's text."""
        return self.read_versioned(path)[0]

    def read_versioned(self, path: str) -> tuple[str, int]:
        """The file's text and its version (pass the version as ``if_version`` to write safely)."""
        response = self._send("GET", self._file(path))
        return response.content.decode("utf-8"), self._version(response)

    def write(self, path: str, content: str, if_version: int | None = None) -> int:
        """Create or replace a file; return its new version.

        ``if_version=N`` writes only if the file is at version N; ``0`` only if it does not
        exist yet. Otherwise :class:`ApiError` 412 and nothing is written.
        """
        response = self._send(
            "PUT", self._file(path), content=content.encode("utf-8"),
            headers={"Content-Type": "text/plain; charset=utf-8",
                     **self._precondition(if_version)},
        )
        return int(response.json()["version"])

    def edit(self, path: str, old: str, new: str, *, replace_all: bool = False,
             if_version: int | None = None) -> int:
        """Replace the exact text ``old`` (unique unless ``replace_all``); return the version."""
        response = self._send(
            "PATCH", self._file(path), json_body={"old": old, "new": new, "replace_all": replace_all},
            headers=self._precondition(if_version),
        )
        return int(response.json()["version"])

    def delete(self, path: str, if_version: int | None = None) -> None:
        self._send("DELETE", self._file(path), headers=self._precondition(if_version))

    def _page(self, params: dict[str, Any], limit: int | None,
              cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        if limit is not None:
            params["limit"] = limit
        if cursor is not None:
            params["cursor"] = cursor
        body = self._send("GET", self._agent + "/files", params=params).json()
        return list(body["entries"]), body.get("next_cursor")

    def ls(self, directory: str = "/", limit: int | None = None,
           cursor: str | None = None) -> Page[Entry]:
        """One page of a directory's direct children; ``next_cursor`` gets the next page."""
        entries, nxt = self._page({"dir": directory}, limit, cursor)
        return Page([Entry(**e) for e in entries], nxt)

    def glob(self, pattern: str, limit: int | None = None,
             cursor: str | None = None) -> Page[str]:
        """One page of the paths matching ``pattern``: ``*``/``?`` within a segment, ``**``
        across segments. A page may be short (even empty) with a ``next_cursor`` when the server
        stopped after examining ``HANGO_GLOB_SCAN_MAX`` paths."""
        entries, nxt = self._page({"glob": pattern}, limit, cursor)
        return Page([e["path"] for e in entries], nxt)

    def iter_ls(self, directory: str = "/", limit: int | None = None) -> Iterator[Entry]:
        """Every child of a directory, page after page (one request per page, on demand)."""
        return _every_page(lambda cursor: self.ls(directory, limit, cursor))

    def iter_glob(self, pattern: str, limit: int | None = None) -> Iterator[str]:
        """Every path matching ``pattern``, page after page."""
        return _every_page(lambda cursor: self.glob(pattern, limit, cursor))

    # history (hango.api.history): the earlier versions of a file under /memories/, /skills/

    def history(self, path: str) -> list[dict[str, Any]]:
        """The file's versions, newest first (``version``, ``size``, ``written_by``, ...)."""
        return list(self._send("GET", self._file(path, "history")).json()["versions"])

    def read_version(self, path: str, version: int) -> str:
        """The text of one version (410 when it is no longer kept)."""
        response = self._send("GET", self._file(path), params={"version": version})
        return response.content.decode("utf-8")

    def diff(self, path: str, old: int, new: int | None = None) -> str:
        """Version ``new`` (default: the current one) as a unified diff against ``old``."""
        params = {"from": old, **({} if new is None else {"to": new})}
        return str(self._send("GET", self._file(path, "diff"), params=params).json()["diff"])

    def restore(self, path: str, version: int, if_version: int | None = None) -> int:
        """Write ``version`` back as a new version (owner or admin); return the new version."""
        when = {} if if_version is None else {"If-Match": f'"{if_version}"'}
        response = self._send("POST", self._file(path, "restore"), json_body={"version": version},
                              headers=when)
        return int(response.json()["version"])

    # config

    def put_agent(self, config: AgentConfig | dict[str, Any]) -> AgentConfig:
        """Create or replace this agent's config (owner or admin)."""
        body = config.model_dump() if isinstance(config, AgentConfig) else config
        return AgentConfig.model_validate(self._send("PUT", self._agent, json_body=body).json())

    def get_agent(self) -> AgentConfig:
        return AgentConfig.model_validate(self._send("GET", self._agent).json())

    def list_agents(self) -> list[str]:
        """The agents of the token's tenant."""
        return [str(a) for a in self._send("GET", "/v1/agents").json()["agents"]]

    # runs and proposals (hango.api.runs): plain JSON dicts, as the API answers them

    def run(self, prompt: str) -> dict[str, Any]:
        """Run the agent in the server; any role. ``status``: done, interrupted or failed."""
        return dict(self._send("POST", self._agent + "/runs", json_body={"prompt": prompt}).json())

    def get_run(self, run_id: str) -> dict[str, Any]:
        return dict(self._send("GET", f"{self._agent}/runs/{quote(run_id, safe='')}").json())

    def runs(self, status: str = "all") -> list[dict[str, Any]]:
        """The agent's runs, newest first (the first page; a member: its own)."""
        return list(self._send("GET", self._agent + "/runs", params={"status": status})
                    .json()["runs"])

    def prompt(self, run_id: str) -> list[dict[str, Any]]:
        """What the model received at each call of a run (``hango.models.view.request_view``)."""
        url = f"{self._agent}/runs/{quote(run_id, safe='')}/prompt"
        return list(self._send("GET", url).json()["calls"])

    def resume(self, run_id: str) -> dict[str, Any]:
        """Continue an interrupted run once its proposal is decided (409 if not, or raced)."""
        url = f"{self._agent}/runs/{quote(run_id, safe='')}/resume"
        return dict(self._send("POST", url).json())

    def proposals(self, status: str = "pending") -> list[dict[str, Any]]:
        """Proposals of this agent (owner or admin)."""
        response = self._send("GET", self._agent + "/proposals", params={"status": status})
        return list(response.json()["proposals"])

    def proposal(self, proposal_id: str) -> dict[str, Any]:
        """One proposal with ``diff``: a unified diff against the file as it is now."""
        return dict(self._send("GET", self._proposal(proposal_id)).json())

    def approve(self, proposal_id: str, content: str | None = None,
                base_version: int | None = None, reason: str | None = None) -> dict[str, Any]:
        """Write it (or ``content``, your edit) against its base version; 409 on a conflict."""
        body = {k: v for k, v in (("content", content), ("base_version", base_version),
                                  ("reason", reason)) if v is not None}
        return dict(self._send("POST", self._proposal(proposal_id) + "/approve",
                               json_body=body).json())

    def reject(self, proposal_id: str, reason: str) -> dict[str, Any]:
        return dict(self._send("POST", self._proposal(proposal_id) + "/reject",
                               json_body={"reason": reason}).json())

    # the token's tenant: its tokens (owner), its exercise checks (hango.api.progress)

    def create_token(self, role: str, label: str = "") -> tuple[str, str]:
        """Mint a token in the caller's tenant (owner): ``(secret, token id)``."""
        body = self._send("POST", "/v1/tokens", json_body={"role": role, "label": label}).json()
        return str(body["token"]), str(body["id"])

    def tokens(self) -> list[dict[str, Any]]:
        """The tokens of the caller's tenant (owner), without their secrets."""
        return list(self._send("GET", "/v1/tokens").json()["tokens"])

    def revoke_token(self, token_id: str) -> None:
        self._send("DELETE", f"/v1/tokens/{quote(token_id, safe='')}")

    def progress(self) -> dict[str, Any]:
        """``{"tenant": the caller's seat, "passed": {exercise id: what it verified}}``."""
        return dict(self._send("GET", "/v1/progress").json())

    def record_check(self, exercise_id: str, passed: bool, message: str) -> None:
        """Record one check of an exercise for the caller's seat (the room view reads it)."""
        self._send("PUT", f"/v1/progress/{quote(exercise_id, safe='')}",
                   json_body={"passed": passed, "message": message[:2000]})

    def _proposal(self, proposal_id: str) -> str:
        return f"{self._agent}/proposals/{quote(proposal_id, safe='')}"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> FilesClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


T = TypeVar("T")


def _every_page(fetch: Callable[[str | None], Page[T]]) -> Iterator[T]:
    """The items of page after page, ``fetch(cursor)`` asked for each one only when needed."""
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        yield from page
        if (cursor := page.next_cursor) is None:
            return
