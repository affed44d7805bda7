"""The acting policy's conventions in several phrasings and near-misses, only offered tools, the
published table equal to README's and glossary's, the same through the stack on PostgreSQL, and the
README's walkthrough against `hango serve` in a subprocess.

The offline model that acts (hango.models.acting): the conventions a learner types, matched in
several phrasings and not in near-misses, from what a real model sees; then the same through the
real stack on PostgreSQL, and the README's walkthrough against ``hango serve`` in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from hango.agent import proposals
from hango.agent.memory import frame
from hango.agent.runtime import Agent
from hango.agent.skills import Skill, render_index
from hango.agent.subagent import TASK_SPEC
from hango.agent.tools import ASK_NOTE, FILESYSTEM_TOOLS
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.acting import HELP, MAX_READS, acting_policy, conventions_table
from hango.models.base import Block, Message, Request, ToolCall, ToolResult, ToolSpec
from hango.models.simulated import Reply, SimulatedModel

ROOT = Path(__file__).resolve().parents[1]
MEMORY = "/memories/AGENTS.md"
ALL = ("edit_file", "glob", "ls", "read_file", "task", "write_file")


def request(prompt: str, *, memory: str | None = None, skills: Sequence[str] = (),
            tools: Sequence[str] = ALL, ask: bool = False,
            turn: Sequence[Message] = ()) -> Request:
    """A request as the stack builds one: base prompt, skills index, memory frame, tool specs
    (their ask-mode descriptions too), all made by the modules that make them in a run."""
    system = [Block("You are a helpful agent.", "system_prompt")]
    if skills:
        system.append(Block(render_index([Skill(n, f"Does {n}.", f"/skills/{n}/SKILL.md", None, None)
                                          for n in skills]), "skills"))
    if memory is not None:
        system.append(Block(frame(MEMORY, memory), MEMORY))
    specs = [ToolSpec(t.spec.name, t.spec.description + (ASK_NOTE if ask and t.spec.name in (
        "write_file", "edit_file") else ""), t.spec.parameters) for t in FILESYSTEM_TOOLS]
    offered = tuple(s for s in [*specs, TASK_SPEC] if s.name in tools)
    return Request("hango-sim-1", offered, tuple(system), (Message("user", prompt), *turn))


def reply(prompt: str, **kwargs: object) -> Reply:
    return acting_policy(request(prompt, **kwargs))  # type: ignore[arg-type]


def after(prompt: str, call: ToolCall, result: str, *, error: bool = False,
          **kwargs: object) -> Reply:
    """The reply once ``call`` (made with id c1) returned ``result``."""
    made = ToolCall("c1", call.name, call.arguments)
    turn = (Message("assistant", tool_calls=(made,)),
            Message("user", tool_results=(ToolResult("c1", result, error),)))
    return acting_policy(request(prompt, turn=turn, **kwargs))  # type: ignore[arg-type]


# --- remember ------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", [
    "Remember that I prefer tea.",
    "remember: I prefer tea.",
    "Please remember that I prefer tea.",
    "Could you please remember that I prefer tea?",
    "Please note for the future that I prefer tea.",
    "Note for later: I prefer tea.",
    "Don't forget that I prefer tea.",
    "don’t forget: I prefer tea.",
    "Do not forget I prefer tea.",
    "Keep in mind that I prefer tea.",
    "Make a note that I prefer tea.",
    "Add to your memory: I prefer tea.",
    "For future reference, I prefer tea.",
    "Hi! Remember that I prefer tea.",
    "I want you to remember that I prefer tea.",
])
def test_remember_in_the_phrasings_a_learner_types(prompt: str) -> None:
    (call,) = reply(prompt).tool_calls
    assert (call.name, call.arguments) == ("write_file", {
        "path": MEMORY, "content": "# Memory\n\n- I prefer tea.\n"})


def test_remember_to_and_from_now_on_keep_the_instruction() -> None:
    assert reply("Remember to answer in French.").tool_calls[0].arguments["content"].endswith(
        "\n- answer in French.\n")
    assert reply("From now on, answer in French.").tool_calls[0].arguments["content"].endswith(
        "\n- From now on, answer in French.\n")


@pytest.mark.parametrize("prompt", [
    "I remember my first computer.",
    "Remembering names is hard for me.",
    "Can you remember things?",
    "Note: the build is green.",
    "I noted that you like tea.",
    "Forget it.",
    "Remember.",
    "Remember that?",
    "Don't remember this.",
])
def test_near_misses_write_nothing(prompt: str) -> None:
    assert reply(prompt).tool_calls == ()
    assert reply(prompt).text == HELP


def test_a_question_about_memory_is_recall_not_a_write() -> None:
    for prompt in ("Do you remember what I like?", "What do you remember?",
                   "what do you know about me?", "What's in your memory?"):
        answer = reply(prompt, memory="# Memory\n\n- I prefer tea.")
        assert answer.tool_calls == () and "I prefer tea." in answer.text, prompt
    assert reply("What do you remember?").text.startswith("My memory is empty")


def test_an_existing_memory_file_is_edited_after_its_last_line() -> None:
    memory = "# Memory\n\n- a\n- b\n- a"  # the last line alone occurs twice
    (call,) = reply("Remember that I live in Lyon.", memory=memory).tool_calls
    assert call.name == "edit_file" and call.arguments["path"] == MEMORY
    old, new = call.arguments["old_string"], call.arguments["new_string"]
    assert memory.count(old) == 1  # an anchor edit_file accepts
    assert memory.replace(old, new) == memory + "\n- I live in Lyon."
    again = reply("Remember that I live in Lyon.", memory=memory + "\n- I live in Lyon.")
    assert again.tool_calls == () and again.text.startswith("I already remember that")


def test_what_it_says_follows_the_mode_and_the_outcome() -> None:
    prompt = "Remember that I prefer tea."
    assert reply(prompt, ask=True).text.startswith("I propose adding “I prefer tea.” to "
                                                   f"{MEMORY}; an owner or admin decides")
    assert reply(prompt).text == f"I will add “I prefer tea.” to {MEMORY}."
    call = reply(prompt).tool_calls[0]
    done = after(prompt, call, f"approved: {MEMORY} written as version 1. Files ...")
    assert done.tool_calls == () and done.text == (
        f"Remembered “I prefer tea.” in {MEMORY}. The tool said: approved: {MEMORY} written as "
        "version 1. Files ...")
    refused = after(prompt, call, "error: '/memories/AGENTS.md' is under the reserved prefix",
                    error=True)
    assert refused.text == ("I could not remember “I prefer tea.”. The tool said: "
                            "'/memories/AGENTS.md' is under the reserved prefix")


def test_only_the_tools_offered_are_ever_called() -> None:
    prompts = ["Remember that I prefer tea.", "Create a skill named notes that keeps notes.",
               "Ask researcher to look.", "Use the pdf skill.", "Read /notes/a.md and /notes/.",
               "hello"]
    for offered in ((), ("read_file",), ("ls",), ("task",), ("write_file", "edit_file"), ALL):
        for prompt in prompts:
            for memory in (None, "- x"):
                got = reply(prompt, tools=offered, memory=memory, skills=["pdf"])
                assert {c.name for c in got.tool_calls} <= set(offered), (offered, prompt)
                if not got.tool_calls and prompt != "hello":
                    assert "is not among my tools" in got.text, (offered, prompt, got.text)


# --- skills, files, subagents --------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["Use the pdf skill to summarise the report.",
                                    "PDF: summarise the report", "with pdf, please"])
def test_naming_a_skill_reads_it_before_answering(prompt: str) -> None:
    (call,) = reply(prompt, skills=["docx", "pdf"]).tool_calls
    assert (call.name, call.arguments) == ("read_file", {"path": "/skills/pdf/SKILL.md"})
    answer = after(prompt, call, "---\nname: pdf\ndescription: d\n---\nRun pdftotext first.",
                   skills=["docx", "pdf"])
    assert answer.text == ("I read the skill pdf (/skills/pdf/SKILL.md) before answering; it "
                           "says: “Run pdftotext first.”")


def test_a_word_containing_a_skill_name_is_no_use_of_it() -> None:
    assert reply("pdfs are hard to read", skills=["pdf"]).tool_calls == ()
    assert reply("a pdf-tools question", skills=["pdf"]).tool_calls == ()


def test_asking_for_a_file_reads_it_and_a_folder_lists_it() -> None:
    (call,) = reply("What's in /notes/todo.md?").tool_calls
    assert (call.name, call.arguments) == ("read_file", {"path": "/notes/todo.md"})
    assert after("What's in /notes/todo.md?", call, "buy milk\nwrite tests").text == (
        "/notes/todo.md says: “buy milk write tests”")
    assert reply("list /notes/ please").tool_calls[0].name == "ls"
    assert reply("see https://example.com/a/b and 24/7").tool_calls == ()
    missing = after("read /x.md", reply("read /x.md").tool_calls[0], "error: no such file: /x.md",
                    error=True)
    assert missing.text == "I could not read /x.md: no such file: /x.md"


def test_a_prompt_naming_many_files_reads_a_bounded_number() -> None:
    prompt = " ".join(f"/f{i}.md" for i in range(MAX_READS + 3))
    calls: list[ToolCall] = []
    turn: list[Message] = []
    while True:
        got = acting_policy(request(prompt, turn=turn))
        if not got.tool_calls:
            break
        call = ToolCall(f"c{len(calls)}", got.tool_calls[0].name, got.tool_calls[0].arguments)
        calls.append(call)
        turn += [Message("assistant", tool_calls=(call,)),
                 Message("user", tool_results=(ToolResult(call.id, "x"),))]
    assert [c.arguments["path"] for c in calls] == [f"/f{i}.md" for i in range(MAX_READS)]
    assert got.text.endswith(f"not read: /f{MAX_READS}.md, /f{MAX_READS + 1}.md, "
                             f"/f{MAX_READS + 2}.md.")


@pytest.mark.parametrize("prompt", ["Ask researcher to summarise /notes/a.md",
                                    "please tell the researcher to summarise /notes/a.md",
                                    "Delegate to researcher: summarise /notes/a.md",
                                    "Could you ask Researcher to summarise /notes/a.md?"])
def test_delegating_calls_task(prompt: str) -> None:
    (call,) = reply(prompt).tool_calls
    assert call.name == "task" and call.arguments["agent"] == "researcher"
    assert call.arguments["description"].startswith("summarise /notes/a.md")
    assert after(prompt, call, "done: 3 points").text == "researcher answered: done: 3 points"


def test_not_a_delegation() -> None:
    for prompt in ("Ask me to summarise /notes/a.md", "I asked researcher to look at /notes/a.md"):
        assert [c.name for c in reply(prompt).tool_calls] == ["read_file"], prompt
    no_task = reply("Ask researcher to look.", tools=("read_file",))
    assert no_task.tool_calls == () and "task is not among my tools" in no_task.text


def test_a_skill_it_is_asked_to_write() -> None:
    prompt = ("Create a skill named cleanup that frees disk space with `rm -rf /tmp/*`, using "
              "the tools read_file and shell.")
    (call,) = reply(prompt, ask=True).tool_calls
    assert call.arguments == {"path": "/skills/cleanup/SKILL.md", "content": (
        '---\nname: cleanup\ndescription: "Frees disk space with `rm -rf /tmp/*`."\n'
        "allowed_tools: [read_file, shell]\n---\n# cleanup\n\nFrees disk space with "
        "`rm -rf /tmp/*`.\n")}
    assert reply("write a skill that summarises", ask=True).text.startswith("Name the skill")


def test_anything_else_gets_the_table_and_the_same_request_the_same_reply() -> None:
    assert reply("hello").text == HELP and conventions_table() in HELP
    assert reply("Remember that x y.") == reply("Remember that x y.")


@pytest.mark.parametrize("doc", ["README.md", "docs/learning/glossary.md"])
def test_the_published_table_is_the_one_the_model_follows(doc: str) -> None:
    assert conventions_table() in (ROOT / doc).read_text(encoding="utf-8")


def test_the_served_model_acts_and_the_library_default_echoes() -> None:
    from hango.api.runs import model_from_settings
    from hango.settings import load_settings

    served = model_from_settings(load_settings())
    assert isinstance(served, SimulatedModel)
    assert served.complete(request("Remember that I prefer tea.")).tool_calls[0].name == \
        "write_file"
    assert SimulatedModel().complete(request("Remember that I prefer tea.")).tool_calls == ()


# --- through the real stack, on PostgreSQL -------------------------------------------------------


def test_through_the_stack_remember_proposes_approve_resume_recall(db: Database,
                                                                    tenant: str) -> None:
    """What it reads is what the stack builds (memory frame, skills index, ask-mode tools)."""
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask"))
    agent = Agent(db, tenant, "a1", SimulatedModel(policy=acting_policy))
    run = agent.run("Please remember that I prefer tea, no sugar.")
    assert run.status == "interrupted" and run.text.startswith("I propose adding")
    assert run.interrupt is not None and run.interrupt["path"] == MEMORY
    proposals.approve(db, tenant, "a1", run.interrupt["proposal_id"], by="owner:t", role="owner",
                      allowlist=frozenset(AgentConfig().tools))
    resumed = agent.resume(run.run_id)
    assert resumed.status == "done" and resumed.text.startswith(
        f"Remembered “I prefer tea, no sugar.” in {MEMORY}. The tool said: approved:")
    assert "- I prefer tea, no sugar." in agent.run("What do you remember?").text
    second = agent.run("Don't forget that I live in Lyon.")  # the file exists now: an edit
    assert second.interrupt is not None and second.interrupt["operation"] == "edit_file"
    assert second.interrupt["diff"].endswith(" - I prefer tea, no sugar.\n+- I live in Lyon.\n")


def test_through_the_stack_refuse_mode_says_the_rule(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="refuse"))
    run = Agent(db, tenant, "a1", SimulatedModel(policy=acting_policy)).run(
        "Remember that I like jazz.")
    assert run.status == "done" and run.interrupt is None
    assert run.text.startswith("I could not remember “I like jazz.”. The tool said: ")
    assert "reserved prefix /memories/" in run.text


def test_through_the_stack_a_skill_a_file_and_a_subagent(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "lead", AgentConfig(tools=[*AgentConfig().tools, "task"],
                                               subagents=["researcher"]))
    save_agent(db, tenant, "researcher", AgentConfig())
    files = PostgresBackend(db, tenant, "lead")
    files.write("/skills/pdf/SKILL.md", "---\nname: pdf\ndescription: Read PDFs.\n"
                "allowed_tools: [read_file]\n---\nRun pdftotext first.\n")
    files.write("/notes/todo.md", "buy milk")
    PostgresBackend(db, tenant, "researcher").write("/notes/a.md", "three findings")
    lead = Agent(db, tenant, "lead", SimulatedModel(policy=acting_policy))
    used = lead.run("Use the pdf skill on /notes/todo.md")
    assert [c.arguments["path"] for r in used.responses for c in r.tool_calls] == [
        "/skills/pdf/SKILL.md", "/notes/todo.md"]
    assert used.text == ("I read the skill pdf (/skills/pdf/SKILL.md) before answering; it says: "
                         "“Run pdftotext first.” /notes/todo.md says: “buy milk”")
    narrowed = lead.run("Use the pdf skill, then list /notes/")  # ls is outside the skill's set
    assert "I could not list /notes/: refused" in narrowed.text
    asked = lead.run("Ask researcher to read /notes/a.md")
    assert asked.text == "researcher answered: /notes/a.md says: “three findings”"


# --- the README's walkthrough, against `hango serve` ------------------------------------------

HANGO = str(Path(sys.executable).with_name("hango"))


def _hango(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HANGO, *args], capture_output=True, text=True, timeout=120)


def _walkthrough() -> tuple[list[str], list[str], str]:
    """The README's walkthrough block: its `hango` lines, the prompts its curl lines send, and
    the block itself."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Agent-written memory, runs and proposals", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [re.sub(r"^TOKEN=\$\((.*)\)$", r"\1", line.split("#")[0].strip())
                for line in block.splitlines() if line.startswith(("hango ", "TOKEN=$(hango "))]
    prompts = [json.loads(body)["prompt"] for body in re.findall(r"-d '(\{\"prompt\".*?\})'", block)]
    return commands, prompts, block


@pytest.fixture
def served(db: Database) -> Iterator[str]:
    """``hango serve`` as the README starts it (the port from HANGO_PORT), in a subprocess."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([HANGO, "serve", "--log-level", "warning"], text=True,
                              env={**os.environ, "HANGO_PORT": str(port)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/openapi.json")
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()
                assert time.monotonic() < deadline, "hango serve did not answer in 60 s"
                time.sleep(0.1)
        yield url
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)


def test_the_readme_walkthrough_works_against_hango_serve(served: str) -> None:
    commands, (remember, recall), block = _walkthrough()
    assert commands[:4] == ["hango serve", "hango tenant create acme",
                            "hango token create acme --role owner",
                            "hango agent create acme assistant --reserved-writes ask"]
    for line in ('"$A/runs?status=interrupted"', '"$A/runs/NEXT/prompt?format=text"',
                 "$A/history/memories/AGENTS.md", '"$A/diff/memories/AGENTS.md?from=1&to=2"',
                 """-H 'If-Match: "2"'""", """-d '{"version": 1}' $A/restore/memories/AGENTS.md""",
                 '"$A/files/memories/AGENTS.md?version=2"'):
        assert line in block, line  # the calls below are the README's
    mine = re.search(r"--data-binary '([^']*)' \$A/files/memories/AGENTS.md", block)
    assert mine is not None
    acme = "acme-" + uuid.uuid4().hex[:8]  # the README's tenant, made unique for this test
    made = [_hango(*line.replace(" acme", f" {acme}").split()[1:]) for line in commands[1:4]]
    assert [m.returncode for m in made] == [0, 0, 0], [m.stderr for m in made]
    token = made[1].stdout.strip()
    a = f"{served}/v1/agents/assistant"
    h = {"Authorization": f"Bearer {token}"}

    put = httpx.put(f"{a}/files{MEMORY}", headers=h, content=mine[1].encode())
    assert (put.status_code, put.json()["version"]) == (201, 1)
    run = httpx.post(f"{a}/runs", headers=h, json={"prompt": remember}, timeout=60)
    assert run.status_code == 201, run.text
    out = run.json()
    assert out["status"] == "interrupted" and out["text"].startswith(
        f"I propose adding “I prefer tea, no sugar.” to {MEMORY}")
    run_id, proposal_id = out["run_id"], out["proposal"]["proposal_id"]
    assert httpx.get(f"{a}/runs/{run_id}", headers=h).json()["status"] == "interrupted"
    waiting = httpx.get(f"{a}/runs", params={"status": "interrupted"}, headers=h).json()
    assert [r["run_id"] for r in waiting["runs"]] == [run_id]
    listed = httpx.get(f"{a}/proposals", headers=h).json()["proposals"]
    assert [p["proposal_id"] for p in listed] == [proposal_id]
    shown = httpx.get(f"{a}/proposals/{proposal_id}", headers=h).json()
    assert shown["path"] == MEMORY and shown["operation"] == "edit_file"
    assert "\n+- Answer in plain words.\n+- I prefer tea, no sugar.\n" in shown["diff"]
    approved = httpx.post(f"{a}/proposals/{proposal_id}/approve", headers=h, json={}).json()
    assert (approved["status"], approved["written_version"]) == ("approved", 2)

    resumed = httpx.post(f"{a}/runs/{run_id}/resume", headers=h, timeout=60).json()
    assert resumed["status"] == "done" and resumed["text"].startswith(
        f"Remembered “I prefer tea, no sugar.” in {MEMORY}. The tool said: approved:")
    assert resumed["usage"][0]["cache_read_input_tokens"] > 1024  # the interrupted prefix
    nxt = httpx.post(f"{a}/runs", headers=h, json={"prompt": recall}, timeout=60).json()
    assert nxt["status"] == "done" and "I prefer tea, no sugar." in nxt["text"]
    assert nxt["usage"][0]["cache_read_input_tokens"] > 1024  # the base prompt is cached

    # The next run's prompt, over HTTP: its memory after the cache breakpoint.
    (call,) = httpx.get(f"{a}/runs/{nxt['run_id']}/prompt", headers=h).json()["calls"]
    cut = call["system_breakpoint"]
    (memory,) = [b for b in call["system"] if b["source"] == MEMORY]
    assert call["system"][cut]["source"] == "system_prompt" and memory["index"] > cut
    assert "- I prefer tea, no sugar." in memory["text"]
    text = httpx.get(f"{a}/runs/{nxt['run_id']}/prompt", params={"format": "text"},
                     headers=h).text
    rows = [row for row in text.splitlines() if row.startswith("  [")]
    assert rows[1].startswith("  [1] system_prompt") and rows[1].endswith("<- cache breakpoint")
    assert rows[2].startswith(f"  [2] {MEMORY}")

    # Undo the approved memory: restore version 1, which is itself a new version.
    versions = httpx.get(f"{a}/history{MEMORY}", headers=h).json()["versions"]
    assert [(v["version"], v["proposal_id"]) for v in versions] == [(2, proposal_id), (1, None)]
    diff = httpx.get(f"{a}/diff{MEMORY}", params={"from": 1, "to": 2}, headers=h).json()["diff"]
    assert "+- I prefer tea, no sugar.\n" in diff
    undone = httpx.post(f"{a}/restore{MEMORY}", headers={**h, "If-Match": '"2"'},
                        json={"version": 1})
    assert (undone.status_code, undone.json()["version"]) == (200, 3)
    assert httpx.get(f"{a}/files{MEMORY}", headers=h).text == mine[1]
    kept = httpx.get(f"{a}/files{MEMORY}", params={"version": 2}, headers=h).text
    assert "- I prefer tea, no sugar." in kept
    after = httpx.post(f"{a}/runs", headers=h, json={"prompt": recall}, timeout=60).json()
    assert "tea" not in after["text"] and "Answer in plain words." in after["text"]

    again = httpx.post(f"{a}/runs/{run_id}/resume", headers=h)
    assert again.status_code == 409 and "was already resumed and is done" in again.text
    never = httpx.post(f"{a}/runs/{nxt['run_id']}/resume", headers=h)
    assert never.status_code == 409 and "was never interrupted: it ended done" in never.text

    # A short prompt stays possible, and says why it reads nothing from the cache.
    assert _hango("agent", "create", acme, "brief", "--system-prompt", "Be brief.").returncode == 0
    for _ in range(2):
        brief = httpx.post(f"{served}/v1/agents/brief/runs", headers=h, json={"prompt": recall},
                           timeout=60).json()
        (call,) = brief["usage"]
        assert call["cache_read_input_tokens"] == 0
        assert call["cache_miss_reason"] == "below_minimum"
