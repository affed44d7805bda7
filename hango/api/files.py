"""The files routes: read, write, edit, delete and list an agent's files over HTTP.

A file path is the URL path after ``/files``, checked (:func:`_file_path`), never resolved. A
write is refused before its body is read when the caller may not write there
(:func:`hango.fs.path.check_write`, the rule the agent's tools obey too). The version is the
``ETag``; ``If-Match`` and ``If-None-Match`` make a write conditional. What the backend refuses
(a missing file, a lost race, a cap, a quota, a file/directory clash) rises as a
:class:`hango.errors.HangoError` and ``hango.api.deps.hango_error`` gives its status.
"""

from __future__ import annotations

import re
from typing import Annotated

import psycopg
from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi import Path as UrlPath
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from hango.api.deps import _Agent, _agent, _errors
from hango.api.plain_get import etag, file_path, file_response
from hango.fs import history
from hango.fs.backend import FileTooLarge, NotText
from hango.fs.path import check_write


class FileVersion(BaseModel):
    path: str
    version: int = Field(description="The file's version after the write (also the ETag).")


class EntryOut(BaseModel):
    path: str = Field(description="Absolute; a directory ends with /.")
    is_dir: bool
    size: int = Field(description="Bytes (0 for a directory).")
    version: int = Field(description="0 for a directory.")


class Listing(BaseModel):
    entries: list[EntryOut]
    next_cursor: str | None = Field(
        default=None, description="Pass as ?cursor= for the next page; null on the last page.")


TEXT_SHAPE = r"^[^\x00]*$"  # file contents are text: no U+0000 (hango.fs.writes.text_bytes)


class EditBody(BaseModel):
    """Replace the exact text ``old`` (which must occur once, unless ``replace_all``) by ``new``."""

    model_config = ConfigDict(extra="forbid")

    old: str = Field(min_length=1, description="Exact text to replace; must be non-empty.",
                     json_schema_extra={"pattern": TEXT_SHAPE})
    new: str = Field(description="Replacement text (may be empty).",
                     json_schema_extra={"pattern": TEXT_SHAPE})
    replace_all: bool = Field(default=False, description="Replace every occurrence.")


_ETAG = {"ETag": {"description": 'The file\'s version, quoted: "3".', "schema": {"type": "string"}}}


_PATH_RULES = (
    "The file's path without its leading /: `memories/AGENTS.md`. Segments are separated by a "
    "plain / (an encoded %2F is refused); no empty, `.` or `..` segment (refused, never "
    "resolved); no backslash, control, invisible or unassigned character; at most 255 bytes a "
    "segment and 1024 bytes in all. Only an owner or admin writes under `memories/` and `skills/`."
)
# Necessary, not sufficient: JSON Schema cannot say "Unicode category Cf" or "255 UTF-8 bytes".
_PATH_SHAPE = r"^[^/\\\x00-\x1f\x7f-\x9f]+(/[^/\\\x00-\x1f\x7f-\x9f]+)*$"
_QUERY_PATH_SHAPE = r"^/[^\\\x00-\x1f\x7f-\x9f]*$"  # absolute; no backslash or control


async def _file_path(
    request: Request,
    path: Annotated[str, UrlPath(description=_PATH_RULES,
                                 json_schema_extra={"pattern": _PATH_SHAPE})],
) -> str:
    """The file path from the URL: checked, never resolved (a PathError is 422, naming the rule)."""
    return file_path(request.scope.get("raw_path") or b"", path)


_VERSION_TAG = re.compile(r'\s*"(\d{1,18})"\s*')


async def _if_match(
    if_match: Annotated[str | None, Header(
        description='Write only at this version: "3". "0" means create only.'),
        WithJsonSchema({"type": "string", "pattern": r'^\s*("\d{1,18}"\s*)?$'})] = None,
) -> int | None:
    if if_match is None or not if_match.strip():
        return None
    found = _VERSION_TAG.fullmatch(if_match)
    if found is None:
        raise HTTPException(422, f'If-Match must be one quoted version such as "3" '
                                 f"(got {if_match!r})")
    return int(found[1])


async def _put_precondition(
    if_match: Annotated[int | None, Depends(_if_match)],
    if_none_match: Annotated[str | None, Header(
        description="`*`: create only, refuse (412) if the file exists."),
        WithJsonSchema({"type": "string", "pattern": r"^\s*\*?\s*$"})] = None,
) -> int | None:
    if if_none_match is None or not if_none_match.strip():
        return if_match
    if if_none_match.strip() != "*":
        raise HTTPException(422, f"If-None-Match supports only * (create only), "
                                 f"got {if_none_match!r}")
    if if_match is not None:
        raise HTTPException(422, "send If-Match or If-None-Match, not both")
    return 0


# --- routes ------------------------------------------------------------------------------------

class _AnyPath(Convertor[str]):
    """Starlette's ``path`` (``.*``) stops at a decoded newline (%0A), which would turn a bad
    path into a bare 404; this one routes it here, to be refused naming the rule."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("hango_path", _AnyPath())
router = APIRouter(prefix="/v1")
FILE_ROUTE = "/agents/{agent_id}/files/{path:hango_path}"


@router.get(
    FILE_ROUTE,
    summary="Read a file, or (?version=N) one of its versions",
    response_class=Response,  # no media type of its own: errors are JSON, the 200 is text
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "headers": _ETAG,
                     "description": "The file's contents; the ETag is its version."},
               **_errors(404, 409, 410)},
)
def read_file(
    agent: Annotated[_Agent, Depends(_agent)], path: Annotated[str, Depends(_file_path)],
    version: Annotated[int | None, Query(ge=1, le=2**62, description=(
        "A version of the file: the current one, or under /memories/ and /skills/ an earlier "
        "one still kept (GET /v1/agents/{agent_id}/history/{path} lists them); 410 when it is "
        "no longer kept."))] = None,
) -> Response:
    try:
        data = (agent.backend.read(path) if version is None
                else history.read_version(agent.backend, path, version))
    except NotText as exc:
        raise HTTPException(409, f"{path}: {exc}") from None
    except FileTooLarge as exc:  # stored before the cap: a conflict with it, not a big request
        raise HTTPException(409, str(exc)) from None
    return file_response(data)


async def _read_text(request: Request, path: str, cap: int) -> str:
    """The body as text, refused (413) once it is known to exceed the file cap ``cap``: from
    Content-Length before reading, else as the chunks arrive (BodyLimit counts them too)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise FileTooLarge(path, int(declared), cap)
    chunks, seen = [], 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > cap:
            raise FileTooLarge(path, seen, cap, at_least=True)
        chunks.append(chunk)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(422, f"the body is not UTF-8 text (byte {exc.start} is invalid); "
                                 "file contents are UTF-8") from None


@router.put(
    FILE_ROUTE,
    summary="Create or replace a file",
    response_model=FileVersion,
    openapi_extra={"requestBody": {"required": False, "description": "The whole new content "
                   "as UTF-8 text; no body writes an empty file.", "content": {
        "text/plain": {"schema": {"type": "string", "pattern": TEXT_SHAPE}}}}},
    responses={200: {"description": "Replaced.", "headers": _ETAG},
               201: {"model": FileVersion, "description": "Created.", "headers": _ETAG},
               **_errors(403, 404, 409, 412, 413)},
)
async def write_file(
    request: Request,
    response: Response,
    agent: Annotated[_Agent, Depends(_agent)],
    path: Annotated[str, Depends(_file_path)],
    if_version: Annotated[int | None, Depends(_put_precondition)],
) -> FileVersion:
    await run_in_threadpool(_may_write, agent, path)
    content = await _read_text(request, path, agent.backend.max_file_bytes)
    version = await run_in_threadpool(_write, agent, path, content, if_version)
    response.status_code = 201 if version == 1 else 200
    response.headers.update(etag(version))
    return FileVersion(path=path, version=version)


def _may_write(agent: _Agent, path: str) -> None:
    """A member writing a reserved path: 403 (or 404, if the agent is not theirs to see)."""
    check_write(path, agent.principal.role)


def _write(agent: _Agent, path: str, content: str, if_version: int | None) -> int:
    try:
        return agent.backend.write(path, content, if_version=if_version)
    except psycopg.errors.ForeignKeyViolation:  # the first file of an agent that is not there
        raise agent.no_agent() from None


@router.patch(
    FILE_ROUTE,
    summary="Edit a file: replace exact text",
    response_model=FileVersion,
    responses={200: {"description": "Edited.", "headers": _ETAG},
               **_errors(403, 404, 409, 412, 413)},
)
def edit_file(
    response: Response,
    agent: Annotated[_Agent, Depends(_agent)],
    path: Annotated[str, Depends(_file_path)],
    edit: EditBody,
    if_version: Annotated[int | None, Depends(_if_match)],
) -> FileVersion:
    _may_write(agent, path)
    version = agent.backend.edit(path, edit.old, edit.new, replace_all=edit.replace_all,
                                 if_version=if_version)
    response.headers.update(etag(version))
    return FileVersion(path=path, version=version)


@router.delete(
    FILE_ROUTE,
    summary="Delete a file",
    status_code=204,
    response_class=Response,
    responses={204: {"description": "Deleted."}, **_errors(403, 404, 412)},
)
def delete_file(
    agent: Annotated[_Agent, Depends(_agent)],
    path: Annotated[str, Depends(_file_path)],
    if_version: Annotated[int | None, Depends(_if_match)],
) -> Response:
    _may_write(agent, path)
    agent.backend.delete(path, if_version=if_version)
    return Response(status_code=204)


@router.get(
    "/agents/{agent_id}/files",
    summary="List a directory (?dir=) or match a pattern (?glob=)",
    response_model=Listing,
    responses=_errors(404),
)
def list_files(
    agent: Annotated[_Agent, Depends(_agent)],
    dir: Annotated[str | None, Query(description="A directory, default /.",
                                     json_schema_extra={"pattern": _QUERY_PATH_SHAPE})] = None,
    glob: Annotated[str | None, Query(description="An absolute pattern: * and ? within a "
                                                   "segment, ** across segments.",
                                      json_schema_extra={"pattern": _QUERY_PATH_SHAPE})] = None,
    limit: Annotated[int | None, Query(ge=1, description=(
        "Entries per page: default HANGO_LIST_PAGE_DEFAULT (1000), at most HANGO_LIST_PAGE_MAX "
        "(10000); a larger limit is reduced to the maximum."))] = None,
    cursor: Annotated[str | None, Query(max_length=8192, description=(
        "The next_cursor of the previous page, unchanged."),
        json_schema_extra={"pattern": r"^[A-Za-z0-9_-]+$"})] = None,
) -> Response:
    if dir is not None and glob is not None:
        raise HTTPException(422, "give ?dir= or ?glob=, not both")
    backend = agent.backend
    try:
        if glob is not None:
            page = backend.glob_entries(glob, limit, cursor)
        else:
            page = backend.ls(dir if dir is not None else "/", limit, cursor)
    except ValueError as exc:  # PathError, a pattern that is not absolute, an invalid cursor
        raise HTTPException(422, str(exc)) from None
    entries = [EntryOut(path=e.path, is_dir=e.is_dir, size=e.size, version=e.version)
               for e in page]
    if not entries and not agent.exists():
        raise agent.no_agent()
    # Serialised here, once (pydantic's Rust encoder): returned as a model, a page of 10,000
    # entries would be validated and encoded a second time by FastAPI, holding the GIL.
    return Response(Listing(entries=entries, next_cursor=page.next_cursor).model_dump_json(),
                    media_type="application/json")

