"""The docs cannot rot: every marked block is what its code prints now, the prose quotes those
outputs, and the README's commands and samples are what hango takes and prints.

``docs/generate.py`` regenerates the marked blocks of the learning doc (each script of its
appendices is run against the simulator, on its own database) and the architecture doc's test
table; here it runs in ``--check`` mode, and the outputs it got are held against the numbers
the prose quotes from them. A number the prose quotes from a notebook must be in that
notebook's committed outputs (which nbval checks).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from hango.agent.runtime import Agent, default_stack
from hango.db import Database

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "docs" / "learning" / "11-memory-and-skills.md"
README = ROOT / "README.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Rendered:
    text: str  # the chapter as committed
    outputs: dict[str, str]  # "ordering.py --every-turn" -> what it printed now

    @property
    def prose(self) -> str:
        """The chapter with its whitespace folded (a quoted figure may wrap)."""
        return " ".join(self.text.split())


@pytest.fixture(scope="module")
def chapter() -> Rendered:
    generate = _generator()
    text = CHAPTER.read_text(encoding="utf-8")
    runner = generate.Runner(generate.scripts_of(text))
    new = generate.render(text, runner)
    assert new == text, "".join(difflib.unified_diff(
        text.splitlines(True), new.splitlines(True), "committed", "what the code prints now")
    ) + "\nrun: .venv/bin/python docs/generate.py"
    return Rendered(text, runner.outputs)


def test_every_block_of_the_chapter_is_what_its_code_prints_now(chapter: Rendered) -> None:
    scripts = set(re.findall(r"^<!-- script: (\S+) -->", chapter.text, re.MULTILINE))
    assert {"ordering.py", "debug.py", "tokens.py", "api.py", "subagent.py", "scope.py",
            "bounds.py", "plan.py", "da_probe.py"} <= scripts
    ran = {command.split()[0] for command in chapter.outputs}
    assert ran == scripts - {"da_probe.py"} or ran == scripts  # da_probe needs deepagents
    assert "ctx.memory_bytes" not in chapter.text and "ctx.skills_count" not in chapter.text


def test_the_architecture_doc_test_table_is_the_test_files_docstrings() -> None:
    generate = _generator()
    doc = ROOT / "docs" / "system-architecture.md"
    text = doc.read_text(encoding="utf-8")
    assert "<!-- generated: test-table -->" in text
    assert generate.render(text, generate.Runner({})) == text, \
        "the test table is stale: run .venv/bin/python docs/generate.py"
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        assert f"| `tests/{path.name}` |" in text


@dataclass
class Call:
    input: int
    write: int
    read: int
    ratio: float


@dataclass
class Table:
    calls: list[Call]
    cost: float
    weighted: float


def tables(output: str) -> dict[str, Table]:
    """``show_usage`` tables of ordering.py, by stack."""
    found: dict[str, Table] = {}
    label, calls = "", []
    for line in output.splitlines():
        if line.startswith("== "):
            label, calls = line[3:], []
        elif m := re.match(r"\s+\d+\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)", line):
            calls.append(Call(int(m[1]), int(m[2]), int(m[3]), float(m[4])))
        elif m := re.match(r"cost \$([\d.]+)\s+token-weighted read ratio ([\d.]+)", line):
            found[label] = Table(calls, float(m[1]), float(m[2]))
    return found


def n(value: int) -> str:
    return f"{value:,}"


def test_the_ordering_prose_quotes_the_ordering_tables(chapter: Rendered) -> None:
    once = tables(chapter.outputs["ordering.py"])
    every = tables(chapter.outputs["ordering.py --every-turn"])
    default, wrong, base = once["default"], once["memory-before-cache"], \
        once["baseline (no skills, no memory)"]
    prose = chapter.prose
    # call 4 reads the prefix up to the system breakpoint: tools + the blocks before it
    request = chapter.outputs["ordering.py"].split("== the last request of default\n")[1]
    tools = int(re.search(r"\(~(\d+) tokens\)", request)[1])  # type: ignore[index]
    blocks = dict(re.findall(r"\] (\S+)\s+~\s*(\d+) tok", request))
    prefix = [int(blocks[b]) for b in ("tenant_cache_scope", "system_prompt", "skills")]
    assert tools + sum(prefix) == default.calls[3].read
    for claim in [
        f"**Call 1 writes everything** ({n(default.calls[0].write)} tokens at 1.25×)",
        f"write only the new turn ({default.calls[1].write} tokens)",
        f"still reads {n(default.calls[3].read)} tokens. That is the tools ({tools}), the "
        f"tenant's cache scope ({prefix[0]}, §4.7), the base prompt ({n(prefix[1])}) and the "
        f"skills index ({prefix[2]})",
        f"are written again ({default.calls[3].write} tokens)",
        f"rewrites all {n(wrong.calls[3].write)} tokens",
        f"${wrong.cost:.6f} − ${default.cost:.6f} = **${wrong.cost - default.cost:.6f}, "
        f"+{round(100 * (wrong.cost / default.cost - 1))}% on the six turns**",
        f"`hango.cache.read_ratio` is {default.calls[3].ratio:.3f} with the default order and "
        f"{wrong.calls[3].ratio:.3f} with the wrong one",
    ]:
        assert claim in prose, claim
    steady = [c.ratio for i, c in enumerate(default.calls) if i not in (0, 3)]
    base_steady = [c.ratio for c in base.calls[1:]]
    assert (f"{min(steady):.3f}–{max(steady):.3f} against "
            f"{min(base_steady):.3f}–{max(base_steady):.3f}") in prose
    assert f"{default.weighted:.3f} against {base.weighted:.3f}" in prose
    nocache = every["no prompt cache at all"].cost
    e_default, e_wrong = every["default"].cost, every["memory-before-cache"].cost
    assert (f"${e_wrong:.6f} against ${nocache:.6f} with no caching at all, "
            f"{round(100 * (e_wrong / nocache - 1))}% worse than not caching. The default order "
            f"costs ${e_default:.6f}, {e_wrong / e_default:.1f}× less") in prose
    system_only = "default, system breakpoint only"
    assert f"(${default.cost:.6f} against ${once[system_only].cost:.6f})" in prose
    assert f"(${e_default:.6f} against ${every[system_only].cost:.6f})" in prose


def test_the_bounds_prose_quotes_the_scripts(chapter: Rendered) -> None:
    prose, out = chapter.prose, chapter.outputs
    tokens = re.search(r"(\d+) bytes, (\d+) tokens\nindex: (\d+) bytes, (\d+) tokens",
                       out["tokens.py"])
    assert tokens is not None
    assert f"every call would carry {n(int(tokens[2]))} tokens" in prose
    assert f"With the index it carries {tokens[4]}." in prose
    memory = re.search(r"bytes transferred (\d+), bytes injected (\d+)", out["bounds.py"])
    assert memory is not None
    assert (f"transferred {n(int(memory[1]))} bytes to inject {n(int(memory[2]))}") in prose
    skills = re.search(r"indexed (\d+), bytes transferred (\d+)", out["bounds.py"])
    heads = re.search(r"^(\d+) heads,", out["plan.py"], re.MULTILINE)
    assert skills is not None and heads is not None
    assert (f"the scan read {heads[1]} files and transferred {n(int(skills[2]))} bytes to "
            f"index {skills[1]}") in prose
    cut = re.search(r"injected (\d+) B; b.md's block: '(b*)\\n", out["bounds.py"])
    assert cut is not None
    assert f"only {len(cut[2])} of its 100 bytes" in prose
    assert f"came to {cut[1]} bytes in all" in prose
    start = re.search(r"block starts: '<memory path=\"/memories/AGENTS.md\">\\n(.*)\['",
                      out["bounds.py"])
    assert start is not None and f"the block starts `{start[1]}[... truncated …`" in prose


def test_the_cache_scope_prose_quotes_the_first_request(chapter: Rendered) -> None:
    scope = re.search(r"tenant_cache_scope\s+~\s*(\d+) tok\s+(cache scope: \w+)",
                      chapter.outputs["scope.py"])
    assert scope is not None
    text = math.ceil(len(scope[2].encode()) / 4)
    assert int(scope[1]) == text + 3
    assert f"each request {scope[1]} tokens larger ({text} for the text, 3 for the block)" \
        in chapter.prose


def _notebook_outputs(name: str) -> str:
    cells = json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))["cells"]
    texts: list[str] = []
    for cell in cells:
        for output in cell.get("outputs", []):
            for part in (output.get("text"), *output.get("data", {}).values()):
                if isinstance(part, list):
                    texts.append("".join(str(p) for p in part))
                elif isinstance(part, str):
                    texts.append(part)
    return "\n".join(texts)


@pytest.mark.parametrize(("notebook", "section", "figures"), [
    ("solutions/06-solutions.ipynb", "06.1 Put memory before PromptCache",
     ["0.83", "0.0", "0.024848", "0.066904"]),
    ("09-agent-written-memory.ipynb", "### 14.2", ["1540", "0.931"]),
    ("10-any-model-prefix-caching.ipynb", "**The two columns.**",
     ["2292", "1912", "2176", "1920", "2370", "2304", "2277", "274", "2.13", "1.10"]),
])
def test_figures_quoted_from_a_notebook_are_in_its_outputs(notebook: str, section: str,
                                                            figures: list[str]) -> None:
    text = CHAPTER.read_text(encoding="utf-8")
    start = text.index(section)
    quoted = text[start:text.index("\n\n**", start + len(section)) if section.startswith("**")
                  else start + 3000].replace(",", "")
    outputs = _notebook_outputs(notebook).replace(",", "")
    for figure in figures:
        assert figure in quoted, f"{figure} is no longer quoted in the chapter's {section!r}"
        assert figure in outputs, f"{figure} (chapter, {section!r}) is not in {notebook}'s outputs"


def test_the_default_stack_listing_is_the_default_stack(sim_agent: Agent) -> None:
    listing = CHAPTER.read_text(encoding="utf-8").split("`DefaultStack` pins this order:", 1)[1]
    names = re.findall(r"^(\w+)\s{2,}", listing.split("```", 2)[1], re.MULTILINE)
    assert names == list(default_stack(sim_agent).slots)


# --- the README ----------------------------------------------------------------------------------


def _readme_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def _hango_lines() -> list[list[list[str]]]:
    """Every ``hango ...`` command of the README's shell blocks, alternatives (``a|b``) expanded,
    each with every choice of its ``[optional]`` parts."""
    found = []
    for block in _readme_blocks():
        for line in block.splitlines():
            line = re.split(r"  #|\s[<>|]\s", line)[0].strip()
            command = re.search(r"(?:^|\$\(|\s)(?:\.venv/bin/)?hango (.+?)(?:\)|$)", line)
            if command is None or line.startswith("#"):
                continue
            text = command[1].replace("$", "")
            parts = re.split(r"\[([^]]*)\]", text)  # text, optional, text, optional, ...
            variants = [shlex.split(" ".join(p for i, p in enumerate(parts)
                                             if i % 2 == 0 or chosen >> (i // 2) & 1))
                        for chosen in range(2 ** (len(parts) // 2))]
            for i in range(max(w.count("|") for w in variants[0]) + 1):
                found.append([[w.split("|")[min(i, w.count("|"))] for w in v] for v in variants])
    return found


def test_every_hango_command_of_the_readme_parses() -> None:
    from hango.cli import _parser

    lines = _hango_lines()
    assert len(lines) > 20
    for variants in lines:
        for words in variants:
            try:
                _parser().parse_args(words)
                break
            except SystemExit:  # argparse's own message is on stderr
                continue
        else:
            pytest.fail(f"the README's `hango {' '.join(variants[-1])}` is not a command hango "
                        "takes")


def test_the_readme_db_status_sample_is_what_it_prints(db: Database) -> None:
    """Past the first two lines (the server, its URL and the login), ``hango db status`` prints
    what the README shows, on the embedded server with the pooler setting of the sample."""
    text = README.read_text(encoding="utf-8")
    sample = text.split("`hango db status` connects and runs a transaction as the app would:")[1]
    shown = sample.split("```")[1].strip().splitlines()[2:]
    env = {"HANGO_DATABASE_POOLER": "transaction"}
    done = subprocess.run([str(Path(sys.executable).with_name("hango")), "db", "status"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[2:] == shown
