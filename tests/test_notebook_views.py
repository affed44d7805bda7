"""The notebooks' views of a request agree with each other and with what the simulator bills."""

from __future__ import annotations

import re

import pytest

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.models.simulated import SimulatedModel, positions
from hango.notebook import show_request
from hango.pictures import draw_request


def test_the_table_and_the_bars_give_each_block_the_tokens_it_is_billed_for(
        db: Database, tenant: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    save_agent(db, tenant, "a1", AgentConfig(system_prompt="You keep the team's notes. " * 40))
    result = Agent(db, tenant, "a1", SimulatedModel(policy=["ok"])).run("hello")
    request = result.requests[0]
    show_request(request)
    table = [int(n) for n in re.findall(r"^  \[\d+\] \S+ +~ *(\d+) tok", capsys.readouterr().out,
                                        flags=re.MULTILINE)]
    billed = [p.tokens for p in positions(request) if p.tier == "system"]
    assert table == billed and len(table) == len(request.system)
    everything = sum(p.tokens for p in positions(request))
    assert everything == result.responses[0].usage.total_input_tokens
    figure = draw_request(request).figure
    bars = {t.get_text() for ax in figure.axes for t in ax.texts}
    for block, tokens in zip(request.system, table, strict=True):
        assert f"{block.source}\n{tokens} tok" in bars
