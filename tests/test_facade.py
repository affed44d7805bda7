"""``hango``'s public facade: every name of ``__all__`` is the object of its own module, and
``import hango`` alone stays light (a CLI start and a notebook's first cell pay for what they use)."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module

import pytest

import hango


@pytest.mark.parametrize("name", hango.__all__)
def test_every_facade_name_is_its_modules_object(name: str) -> None:
    module = import_module(hango._WHERE[name])
    assert getattr(hango, name) is getattr(module, name)


def test_the_facade_lists_what_it_maps() -> None:
    assert sorted(hango.__all__) == sorted(hango._WHERE)
    assert set(hango.__all__) <= set(dir(hango))


def test_an_unknown_name_is_a_clear_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'hango' has no attribute 'Agnet'"):
        _ = hango.Agnet  # type: ignore[attr-defined]


def test_import_hango_loads_no_driver_framework_or_plotting() -> None:
    heavy = ("psycopg", "fastapi", "httpx", "opentelemetry", "matplotlib", "pydantic", "hango.db")
    code = ("import sys, hango\n"
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
