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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from hango.agents import AgentConfig
from hango.fs.backend import Page


class ApiError(Exception):
    """The files API refused a request: ``status`` is the HTTP status, ``message`` says why."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = body  # the whole JSON error (a 409 conflict carries the fresh diff)


@dataclass(frozen=True)
class Entry:
    """One line of a listing: a file (with size and version) or a directory (ends with /)."""

    path: str
    is_dir: bool
    size: int
    version: int


def _segment(text: str) -> str:
    # httpx (like browsers) would resolve a literal "." or ".." segment before sending it; the
    # server must see it, and refuse it, so dots that form a whole segment are percent-encoded.
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
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.agent_id = agent_id
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            transport=transport,
            timeout=timeout,
        )
        self._agent = f"/v1/agents/{quote(agent_id, safe='')}"

    def _file(self, path: str) -> str:
        if not path.startswith("/"):
            # Over HTTP every path is absolute (it follows /files/), so refuse here what
            # clean() would refuse, rather than quietly adding the slash.
            raise ApiError(422, f"invalid path {path!r}: must be absolute (start with /)")
        return self._agent + "/files/" + "/".join(_segment(s) for s in path[1:].split("/"))

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, url, **kwargs)
        if response.is_success:
            return response
        body: Any = None
        try:
            body = response.json()
            message = str(body["detail"])
        except (ValueError, KeyError, TypeError):
            message = response.text or response.reason_phrase
        raise ApiError(response.status_code, message, body)

    @staticmethod
    def _precondition(if_version: int | None) -> dict[str, str]:
        if if_version is None:
            return {}
        if if_version == 0:
            return {"If-None-Match": "*"}
        return {"If-Match": f'"{if_version}"'}

    @staticmethod
    def _version(response: httpx.Response) -> int:
        return int(response.headers["ETag"].strip('"'))

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
            "PATCH", self._file(path), json={"old": old, "new": new, "replace_all": replace_all},
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

    # config

    def put_agent(self, config: AgentConfig | dict[str, Any]) -> AgentConfig:
        """Create or replace this agent's config (owner or admin)."""
        body = config.model_dump() if isinstance(config, AgentConfig) else config
        return AgentConfig.model_validate(self._send("PUT", self._agent, json=body).json())

    def get_agent(self) -> AgentConfig:
        return AgentConfig.model_validate(self._send("GET", self._agent).json())

    def list_agents(self) -> list[str]:
        """The agents of the token's tenant."""
        return [str(a) for a in self._send("GET", "/v1/agents").json()["agents"]]

    # runs and proposals (hango.api.runs): plain JSON dicts, as the API answers them

    def run(self, prompt: str) -> dict[str, Any]:
        """Run the agent in the server; any role. ``status``: done, interrupted or failed."""
        return dict(self._send("POST", self._agent + "/runs", json={"prompt": prompt}).json())

    def get_run(self, run_id: str) -> dict[str, Any]:
        return dict(self._send("GET", f"{self._agent}/runs/{quote(run_id, safe='')}").json())

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
                               json=body).json())

    def reject(self, proposal_id: str, reason: str) -> dict[str, Any]:
        return dict(self._send("POST", self._proposal(proposal_id) + "/reject",
                               json={"reason": reason}).json())

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
