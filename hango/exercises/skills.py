"""Checks for notebooks 03 (skills index), 04 (broken frontmatter) and 05 (allowed-tools)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hango.agents import AgentConfig
from hango.exercises._core import (
    NotYet,
    _index_text,
    _refused,
    _run,
    _scratch,
    _tool_results,
    exercise,
    tool_names,
)

if TYPE_CHECKING:
    from hango.agent.runtime import RunResult
    from hango.notebook import Course


# --- 03 skills index -----------------------------------------------------------------------------


@exercise("03.1", "Add a skill and watch the index appear",
          answer="result=the RunResult of a run with two sources, each holding a pdf skill",
          hint="write /skills/csv/SKILL.md and /skills/team/pdf/SKILL.md; configure "
               "skills=['/skills/base/', '/skills/team/'] with a pdf in each")
def _03_1(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    index = _index_text(run)
    names = [line.split()[1] for line in index.splitlines() if line.startswith("- ")]
    if "pdf" not in names:
        raise NotYet(f"no pdf skill in the index (it has {names})")
    if not any("overrides" in w for w in run.warnings):
        raise NotYet("no warning about one pdf overriding another: configure two sources")
    for path in course.owner.glob("/skills/**/SKILL.md"):
        body = course.owner.read(path).split("\n---", 2)[-1].strip()
        if body and any(body in b.text for r in run.requests for b in r.system):
            raise NotYet(f"the body of {path} is in a system block")
    return f"index {names}; the later source's pdf wins, with a warning; no body in any prompt"


@exercise("03.2", "Predict what the count cap keeps",
          answer="kept=the name of the skill you expect to stay (a string), result=the run with "
                 "skills_max=1",
          hint="the cap keeps skills by name, in order; the warning names the rest")
def _03_2(course: Course, kept: str | None = None, result: RunResult | None = None) -> str:
    run = _run(result)
    if not isinstance(kept, str):
        raise NotYet(f"kept should be the name of one skill, a string; got {kept!r}")
    indexed = [line.split()[1] for line in _index_text(run).splitlines() if line.startswith("- ")]
    if indexed != [kept]:
        raise NotYet(f"you predicted {kept!r}; the index kept {indexed}")
    said = [w for w in run.warnings if "HANGO_SKILLS_MAX" in w]
    if not said:
        raise NotYet("no warning names HANGO_SKILLS_MAX: run with load_settings(skills_max=1)")
    return f"kept {kept!r}; the warning: {said[0]!r}"


# --- 04 broken frontmatter -------------------------------------------------------------------


@exercise("04.1", "Break the frontmatter and read the warning",
          answer="results=[three RunResults, one broken skill each]",
          hint="an unquoted ': ' in a value, name: yes, and a description of 1,025 characters; then "
               "quote, quote, and cut one character")
def _04_1(course: Course, results: Sequence[RunResult] | None = None) -> str:
    if not results or len(results) != 3:
        raise NotYet("pass the three runs as results=[...]")
    for run in results:
        run = _run(run, "results")
        if run.stop_reason != "final":
            raise NotYet(f"run {run.run_id} did not finish: a bad skill must never fail a run")
        skipped = [w for w in run.warnings if "skipped" in w]
        if not skipped:
            raise NotYet(f"run {run.run_id} skipped no skill: is the frontmatter really broken?")
        if not any("/SKILL.md" in w and "line" in w for w in skipped) and \
                not any("1024" in w or "1,024" in w for w in skipped):
            raise NotYet(f"run {run.run_id}'s warning does not name the file and line: {skipped}")
        if "- report " not in _index_text(run):
            raise NotYet(f"run {run.run_id} lost the good skill 'report'")
    return "each run finished, kept 'report', and named the broken file, its line and the rule"


@exercise("04.2", "Find the schema's limits",
          answer="predicted={case: True if parse() accepts it, False if it raises} for each of the three "
                 "cases",
          hint="parse() raises FrontmatterError or returns a Frontmatter; predict which")
def _04_2(course: Course, predicted: dict[str, bool] | None = None) -> str:
    from hango.agent.frontmatter import FrontmatterError, parse

    cases = {
        "name of 65 characters": "---\nname: " + "a" * 65 + "\ndescription: d\n---\n",
        "description of 1,024 characters": "---\nname: a\ndescription: " + "d" * 1024 + "\n---\n",
        "allowed-tools: with nothing after it": "---\nname: a\ndescription: d\nallowed-tools:\n---\n",
    }
    if not isinstance(predicted, dict) or set(predicted) != set(cases):
        raise NotYet(f"pass predicted={{...}} with True (accepted) or False for each of {list(cases)}")
    unsure = [k for k in cases if not isinstance(predicted[k], bool)]
    if unsure:
        raise NotYet(f"your prediction for {unsure} is not True or False: write one of the two "
                     "for each case")
    actual = {}
    for name, text in cases.items():
        try:
            parse(text)
            actual[name] = True
        except FrontmatterError:
            actual[name] = False
    wrong = sum(predicted[k] != actual[k] for k in cases)
    if wrong:  # which ones would give the answers away: try parse() on each instead
        raise NotYet(f"{wrong} of your 3 predictions {'differs' if wrong == 1 else 'differ'} from "
                     "what parse() does: run parse() on each case and read what it says")
    return f"all three as predicted: {actual}"


# --- 05 allowed-tools narrowing ------------------------------------------------------------------


@exercise("05.1", "Make a skill narrow tools",
          answer="result=the RunResult of a run that reads the skill, then calls ls, then write_file",
          hint="allowed-tools: read_file write_file on an agent with tools [read_file, ls]; script "
               "read_file of the skill, then ls, then write_file")
def _05_1(course: Course, result: RunResult | None = None) -> str:
    run = _run(result)
    narrowed = [e for e in run.events if e.name == "agent.skill_tools_narrowed"]
    if not any("write_file" in str(e.attributes) for e in narrowed):
        raise NotYet("no agent.skill_tools_narrowed event drops write_file")
    calls = _tool_results(run)
    read_at = next((i for i, (n, a, _, err) in enumerate(calls)
                    if n == "read_file" and str(a.get("path", "")).endswith("SKILL.md") and not err),
                   None)
    if read_at is None:
        raise NotYet("the model never read the skill's SKILL.md")
    refused_ls = [i for i, (n, _, c, err) in enumerate(calls) if n == "ls" and _refused(c, err)]
    if not refused_ls or min(refused_ls) < read_at:
        raise NotYet("ls was not refused after the skill was read")
    return "write_file dropped at index time; ls refused only once the skill was in use"


@exercise("05.2", "Tell an empty allowed-tools list from a missing key",
          answer="with_empty_list=a set of tool names, without_key=a set of tool names (set() for none)",
          hint="Frontmatter.allowed_tools is () for [] and None for no key")
def _05_2(course: Course, with_empty_list: set[str] | None = None,
          without_key: set[str] | None = None) -> str:
    from hango.models.simulated import SimulatedModel, tool_call

    allow = ["read_file", "ls"]
    actual = {}
    for label, line in (("[]", "allowed-tools: []\n"), ("no key", "")):
        backend = _scratch(course, "check-05-2", AgentConfig(tools=allow, memory=[]))
        backend.write("/skills/s/SKILL.md", f"---\nname: s\ndescription: d\n{line}---\n# s\n")
        skill = {"path": "/skills/s/SKILL.md"}
        model = SimulatedModel(policy=[[tool_call("read_file", skill)],
                                       [tool_call("read_file", skill), tool_call("ls", {"path": "/"})],
                                       "done"])
        run = course.agent(model, "check-05-2").run("go")
        actual[label] = {n for n, _, c, err in _tool_results(run)[1:] if not _refused(c, err)}
    if with_empty_list is None or without_key is None:
        raise NotYet("pass with_empty_list={...} and without_key={...}: the tools still callable")
    empty = tool_names(with_empty_list, "with_empty_list")
    none = tool_names(without_key, "without_key")
    if empty != actual["[]"] or none != actual["no key"]:
        raise NotYet(f"predicted {empty or 'set()'} and {none or 'set()'}; the agent could call "
                     "something else")
    return (f"after reading it: [] leaves {sorted(actual['[]']) or 'nothing'}, no key leaves "
            f"{sorted(actual['no key'])}")
