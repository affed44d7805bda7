"""How long does hango take to read one real SKILL.md frontmatter, beside PyYAML's two loaders?

The 92 real files of ``tests/data/skills-corpus``, in this one process:

- hango ``frontmatter.parse`` gets the file's bytes (it cuts the frontmatter out itself, decodes
  it and checks the schema: more work than PyYAML is asked for);
- PyYAML ``yaml.load(..., Loader=CSafeLoader)`` (libyaml, C) and ``SafeLoader`` (pure Python) get
  the frontmatter text, already cut out with deepagents' regex.

Each file is timed for the three parsers in turn (interleaved, so a burst of load hits all
three alike): the best of ``--repeats`` rounds of ``--number`` calls, in µs per call. The figure
is the median over the files. The machine load is printed before and after.

Run: ``.venv/bin/python bench/frontmatter_parse.py [--repeats 7] [--number 50]``.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import yaml  # type: ignore[import-untyped]

from hango.agent.frontmatter import FrontmatterError, parse

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "skills-corpus" / "files"
FRONTMATTER = re.compile(r"^---\s*\n(.*?)\n---\s*\n", re.DOTALL)  # deepagents' split


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def best_us(fn: Callable[[bytes, str], object], raw: bytes, text: str, repeats: int,
            number: int) -> float:
    """The best of ``repeats`` rounds of ``number`` calls, in µs per call (errors count as work)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            with contextlib.suppress(FrontmatterError, yaml.YAMLError):
                fn(raw, text)
        best = min(best, time.perf_counter() - start)
    return best / number * 1e6


def style(text: str) -> str:
    """How the file writes its description: the styles cost differently."""
    match = re.search(r"^description:[ ]*(.)", text, re.M)
    first = match.group(1) if match else ""
    return {"'": "single-quoted", '"': "double-quoted", "|": "block", ">": "block"}.get(first, "plain")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=50)
    args = parser.parse_args()
    files = sorted(CORPUS.rglob("SKILL.md"))
    if not files:
        raise SystemExit(f"corpus not found at {CORPUS}")
    corpus = []
    for path in files:
        raw = path.read_bytes()
        match = FRONTMATTER.match(raw.decode("utf-8").removeprefix("\ufeff"))
        corpus.append((raw, match.group(1) if match else ""))
    parsers: dict[str, Callable[[bytes, str], object]] = {
        "hango frontmatter.parse": lambda raw, _: parse(raw),
        "PyYAML CSafeLoader (libyaml)": lambda _, text: yaml.load(text, Loader=yaml.CSafeLoader),
        "PyYAML SafeLoader": lambda _, text: yaml.load(text, Loader=yaml.SafeLoader),
    }
    load_before = loadavg()
    times: dict[str, list[float]] = {label: [] for label in parsers}
    for raw, text in corpus:
        for label, fn in parsers.items():
            times[label].append(best_us(fn, raw, text, args.repeats, args.number))
    load_after = loadavg()

    print(f"frontmatter parse per real SKILL.md: {len(corpus)} files, best of {args.repeats} x "
          f"{args.number} calls per file, median over files")
    print(f"  Python {platform.python_version()}, PyYAML {yaml.__version__} "
          f"(libyaml {'yes' if yaml.__with_libyaml__ else 'NO'}); load average {load_before} "
          f"before, {load_after} after")
    libyaml = statistics.median(times["PyYAML CSafeLoader (libyaml)"])
    print(f"  {'parser':<30} {'median µs':>10} {'p90 µs':>8} {'max µs':>8} {'vs libyaml':>11}")
    for label, values in times.items():
        median = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"  {label:<30} {median:10.1f} {p90:8.1f} {max(values):8.1f} {median / libyaml:10.2f}x")
    styles = [style(text) for _, text in corpus]
    print("  median µs by description style (hango / libyaml):")
    for name in sorted(set(styles)):
        picked = [i for i, s in enumerate(styles) if s == name]
        hango = statistics.median(times["hango frontmatter.parse"][i] for i in picked)
        c = statistics.median(times["PyYAML CSafeLoader (libyaml)"][i] for i in picked)
        print(f"    {name:<14} {len(picked):3d} files  {hango:7.1f} / {c:7.1f}  = {hango / c:.2f}x")


if __name__ == "__main__":
    main()
