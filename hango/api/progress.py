"""A learner's own exercise checks over HTTP, for the room view of a shared server.

- ``GET /v1/progress``: the caller's seat (its tenant) and the exercises it passed, with what
  each first pass verified.
- ``PUT /v1/progress/{exercise}`` ``{"passed": true|false, "message": "..."}``: one check, as a
  notebook's ``check()`` printed it (PASS with what it verified, or NOT YET with what is
  missing). Any role of the seat; the tenant is the token's. See :mod:`hango.room`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi import Path as UrlPath
from pydantic import BaseModel, ConfigDict, Field

from hango.agents import Principal
from hango.api.deps import _db, _errors, _principal
from hango.api.files import TEXT_SHAPE
from hango.room import EXERCISE_ID, MESSAGE_MAX, passed_checks, record_check

router = APIRouter(prefix="/v1")


class Progress(BaseModel):
    tenant: str = Field(description="The caller's seat: the learner the room view shows.")
    passed: dict[str, str] = Field(description="Exercise id -> what its first pass verified.")


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid")
    passed: bool
    message: str = Field(default="", max_length=MESSAGE_MAX, json_schema_extra={"pattern": TEXT_SHAPE},
                         description="What the check printed after PASS or NOT YET.")


@router.get("/progress", summary="The caller's seat and the exercises it passed (any role)",
            response_model=Progress, responses=_errors())
def get_progress(request: Request, principal: Annotated[Principal, Depends(_principal)]) -> Progress:
    return Progress(tenant=principal.tenant_id, passed=passed_checks(_db(request), principal.tenant_id))


@router.put("/progress/{exercise_id}", summary="Record one check of an exercise (any role)",
            status_code=204, response_class=Response, responses=_errors())
def put_check(request: Request, principal: Annotated[Principal, Depends(_principal)],
              exercise_id: Annotated[str, UrlPath(pattern=EXERCISE_ID.pattern)],
              body: Check) -> Response:
    record_check(_db(request), principal.tenant_id, exercise_id, body.passed, body.message)
    return Response(status_code=204)
