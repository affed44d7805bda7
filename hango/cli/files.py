"""``hango files push|pull`` and ``hango skills check``: an agent's files and local folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from hango.cli.common import CliError, say
from hango.settings import Settings


def cmd_files(args: argparse.Namespace, settings: Settings) -> int:
    """Push a local folder to an agent's files, or pull them, through the files API."""
    from hango.api.client import FilesClient, Unreachable
    from hango.api.sync import pull, push

    token = args.token or settings.token
    if not token:
        raise CliError("a bearer token is needed: --token or HANGO_TOKEN (see `hango token create`)")
    url = args.url or f"http://{settings.host}:{settings.port}"
    with FilesClient(url, token, args.agent) as client:
        try:
            if args.action == "push":
                report = push(client, Path(args.local), args.remote)
            else:
                report = pull(client, args.remote, Path(args.local), force=args.force)
        except Unreachable as exc:
            raise CliError(f"cannot reach the files API at {url} ({exc}); is `hango serve` "
                           "running? (--url)") from None
    for line in report.lines():
        print(line)
    if report.conflicts and args.action == "pull":
        say("a conflict is a local file edited since the last pull: it is kept as it is; "
            "--force replaces it with the agent's")
    return 0 if report.ok else 1


# --- skills ------------------------------------------------------------------------------------


def cmd_skills(args: argparse.Namespace, settings: Settings) -> int:
    from hango.agent.skills_check import check_paths

    verdicts = check_paths(args.paths, strict=args.strict)
    for verdict in verdicts:
        print(verdict)
    bad = sum(verdict.problem is not None for verdict in verdicts)
    say(f"{len(verdicts)} checked: {len(verdicts) - bad} ok, {bad} with problems")
    return 1 if bad else 0
