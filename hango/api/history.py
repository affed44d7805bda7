"""A file's history over HTTP: its versions, the diff between two, and a restore.

Under ``/memories/`` and ``/skills/`` every write keeps the previous version
(:mod:`hango.fs.history`, at most ``HANGO_HISTORY_MAX_VERSIONS`` a file), whatever door wrote it:

- ``GET /v1/agents/{agent}/history/{path}``: the versions, newest first: size, when, by whom
  (role and token fingerprint), from which proposal or restored from which version; a deleted
  file's history stays (its last version says when and by whom it was deleted).
- ``GET /v1/agents/{agent}/files/{path}?version=N``: one version's text (:mod:`hango.api.files`).
- ``GET /v1/agents/{agent}/diff/{path}?from=N&to=M``: a unified diff (``to``: the current one).
- ``POST /v1/agents/{agent}/restore/{path}`` ``{"version": N}``: version N written back as a new
  version, through the one write path (its cap, the quota, ``If-Match``); owners and admins.

Any role reads a history, as it reads the files; a version no longer kept is 410 naming the
setting; another tenant's agent or file is 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from hango.api.deps import _Agent, _agent, _errors
from hango.api.files import FileVersion, _file_path, _if_match
from hango.api.plain_get import etag
from hango.fs import history
from hango.fs.path import WRITERS

router = APIRouter(prefix="/v1")
Version = Annotated[int, Query(ge=1, le=2**62)]


class VersionOut(BaseModel):
    version: int
    size: int = Field(description="Bytes.")
    written_at: str
    written_by: str | None = Field(description="Role and token fingerprint of who wrote it "
                                   "(an approval: who approved); null: written in code.")
    proposal_id: str | None = Field(description="The approved proposal that wrote it.")
    restored_from: int | None = Field(description="The version a restore copied.")
    current: bool = Field(description="The file as it is now.")
    deleted_at: str | None = Field(default=None, description="The file was deleted after this "
                                   "version (it can be restored).")
    deleted_by: str | None = None


class HistoryOut(BaseModel):
    path: str
    current_version: int | None = Field(description="null: the file was deleted.")
    max_versions: int = Field(description="HANGO_HISTORY_MAX_VERSIONS: earlier versions kept.")
    versions: list[VersionOut]


class DiffOut(BaseModel):
    path: str
    from_version: int
    to_version: int
    diff: str = Field(description="Unified diff; empty when the two are the same text.")


class RestoreBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=1, le=2**62, description="The version to write back.")


@router.get("/agents/{agent_id}/history/{path:hango_path}",
            summary="A file's versions, newest first", response_model=HistoryOut,
            responses=_errors(404))
def get_history(agent: Annotated[_Agent, Depends(_agent)],
                path: Annotated[str, Depends(_file_path)]) -> HistoryOut:
    found = history.versions(agent.backend, path)
    current = next((v.version for v in found if v.current), None)
    return HistoryOut(path=path, current_version=current,
                      max_versions=agent.backend.settings.history_max_versions,
                      versions=[VersionOut(**vars(v)) for v in found])


@router.get("/agents/{agent_id}/diff/{path:hango_path}",
            summary="The diff between two versions of a file", response_model=DiffOut,
            responses=_errors(404, 409, 410))
def get_diff(agent: Annotated[_Agent, Depends(_agent)],
             path: Annotated[str, Depends(_file_path)],
             from_version: Annotated[int, Query(alias="from", ge=1, le=2**62)],
             to_version: Annotated[int | None, Query(alias="to", ge=1, le=2**62, description=(
                 "Default: the current version."))] = None) -> DiffOut:
    if to_version is None:
        to_version = history.versions(agent.backend, path)[0].version
    return DiffOut(path=path, from_version=from_version, to_version=to_version,
                   diff=history.diff(agent.backend, path, from_version, to_version))


@router.post("/agents/{agent_id}/restore/{path:hango_path}",
             summary="Write an earlier version back as a new one (owner or admin)",
             response_model=FileVersion, responses=_errors(403, 404, 409, 410, 412, 413))
def restore(response: Response, agent: Annotated[_Agent, Depends(_agent)],
            path: Annotated[str, Depends(_file_path)], body: RestoreBody,
            if_version: Annotated[int | None, Depends(_if_match)]) -> FileVersion:
    if agent.principal.role not in WRITERS:
        if not agent.exists():
            raise agent.no_agent()
        raise HTTPException(403, f"only an owner or admin may restore a version (this token is "
                                 f"a {agent.principal.role})")
    version = history.restore(agent.backend, path, body.version, if_version)
    response.headers.update(etag(version))
    return FileVersion(path=path, version=version)
