"""``hango files push|pull``: a local folder and an agent's files, kept in step over the files API.

A learner brings a real skills folder in with ``hango files push ./my-skills /skills/`` and takes
the agent's files out with ``pull``. Everything goes through the HTTP API, so the server's rules
hold as for any client: the token's role (a member cannot push under ``/skills/``), the path rules,
the body and file caps. Nothing is clobbered on either side. A push writes conditionally: a file
that changed on the server since this command read it is reported as a conflict and left alone
(``If-Match``). A pull remembers what it wrote (``.hango-pull.json`` in the folder, a digest per
file): a local file that differs from the server's is replaced only if it is still exactly what
the last pull wrote; one edited since (or never pulled) is a conflict, kept as it is, unless
``force``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hango.api.client import ApiError, FilesClient


@dataclass
class SyncReport:
    """What one push or pull did, one list per outcome (paths on the side that was written)."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # "path: reason"

    @property
    def ok(self) -> bool:
        return not self.conflicts and not self.refused

    def lines(self) -> Iterator[str]:
        for path in self.written:
            yield f"written    {path}"
        for path in self.conflicts:
            yield f"conflict   {path} (changed meanwhile; nothing written)"
        for problem in self.refused:
            yield f"refused    {problem}"
        yield (f"{len(self.written)} written, {len(self.unchanged)} unchanged, "
               f"{len(self.conflicts)} conflict(s), {len(self.refused)} refused")


def _remote_dir(directory: str) -> str:
    if not directory.startswith("/"):
        raise ValueError(f"the agent's folder must be absolute, got {directory!r}")
    return directory if directory.endswith("/") else directory + "/"


def _local_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise ValueError(f"{root} is not a folder")
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))


def push(client: FilesClient, local: Path, remote: str) -> SyncReport:
    """Write every file under ``local`` (hidden ones skipped) to ``remote`` + its relative path."""
    report, remote = SyncReport(), _remote_dir(remote)
    for file in _local_files(local):
        path = remote + file.relative_to(local).as_posix()
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            report.refused.append(f"{file}: not UTF-8 text")
            continue
        try:
            try:
                current, version = client.read_versioned(path)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                current, version = None, 0  # 0: create only if it still does not exist
            if current == text:
                report.unchanged.append(path)
                continue
            client.write(path, text, if_version=version)
            report.written.append(path)
        except ApiError as exc:
            if exc.status == 412:
                report.conflicts.append(path)
            else:
                report.refused.append(f"{path}: {exc.status} {exc.message}")
    return report


PULLED = ".hango-pull.json"  # what the last pull wrote into a folder: {relative path: sha256}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pulled(local: Path) -> dict[str, str]:
    try:
        record = json.loads((local / PULLED).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}


def pull(client: FilesClient, remote: str, local: Path, force: bool = False) -> SyncReport:
    """Copy every file under ``remote`` into ``local``. A local file that differs is replaced
    only if it is what the last pull wrote (or with ``force``); otherwise it is a conflict."""
    report, remote = SyncReport(), _remote_dir(remote)
    record = _pulled(local)
    for path in client.iter_glob(remote + "**"):
        relative = path.removeprefix(remote)
        target = local / relative
        if local.resolve() not in target.resolve().parents:
            report.refused.append(f"{path}: would be written outside {local}")
            continue
        text = client.read(path)
        if target.is_file():
            mine = target.read_bytes().decode("utf-8", errors="replace")
            if mine == text:
                record[relative] = _digest(text)
                report.unchanged.append(str(target))
                continue
            if not force and record.get(relative) != _digest(mine):
                report.conflicts.append(str(target))  # edited here since the last pull
                continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        record[relative] = _digest(text)
        report.written.append(str(target))
    if record:
        local.mkdir(parents=True, exist_ok=True)
        (local / PULLED).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n",
                                    encoding="utf-8")
    return report
