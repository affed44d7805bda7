"""PromptCache: where the cache breakpoints go.

Its position in the stack *is* its behaviour: the stack marks the system breakpoint on the last
block contributed by the middlewares before it (see ``Stack.build_request``). Everything before
the breakpoint (tools, the base prompt, the skills index) is one cached prefix; anything after it
(memory) can change without invalidating that prefix.

Around each model call it also adds a *conversation* breakpoint on the last message, so the
growing history of a multi-turn run is read from the cache instead of paid again. That makes two
of the provider's four breakpoints; the rest stay free for callers.
"""

from __future__ import annotations

from dataclasses import replace

from hango.agent.hooks import ModelCall, RunContext
from hango.models.base import Breakpoint, Request, Response

MAX_BREAKPOINTS = 4  # the provider's limit: "A maximum of 4 blocks with cache_control"


class PromptCache:
    """Marks the system breakpoint (by its place in the chain) and a conversation breakpoint."""

    name = "prompt_cache"
    marks_breakpoint = True

    def __init__(self, conversation: bool = True) -> None:
        self.conversation = conversation

    def wrap_model_call(self, ctx: RunContext, request: Request, call_next: ModelCall) -> Response:
        marks = list(request.breakpoints)
        if self.conversation and request.messages:
            last = Breakpoint("messages", len(request.messages) - 1)
            if last not in marks and len(marks) < MAX_BREAKPOINTS:
                marks.append(last)
        return call_next(replace(request, breakpoints=tuple(marks)))
