"""Summarise a finished `mutmut run` (issue 11 point 5): score per module, and every survivor with
its one-line diff, so docs/reliability.md can give each a verdict.

Run from the repository root after `make mutation`:  python tests/mutation_report.py [--survivors]
It reads mutmut's own results (``mutmut results --all true``) and diffs (``mutmut show``)."""

from __future__ import annotations

import collections
import re
import subprocess
import sys


def _results() -> list[tuple[str, str]]:
    out = subprocess.run(["mutmut", "results", "--all", "true"], capture_output=True, text=True,
                         check=True).stdout
    rows = []
    for line in out.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            rows.append((name, status))
    return rows


def _module(name: str) -> str:
    return name.split(".x", 1)[0].rsplit(".x_", 1)[0]


def _function(name: str) -> str:
    return re.sub(r"__mutmut_\d+$", "", name.split(".", 3)[-1]).replace("ǁ", ".").lstrip("x_.")


def _diff(name: str) -> str:
    out = subprocess.run(["mutmut", "show", name], capture_output=True, text=True).stdout
    minus = [ln[1:].strip() for ln in out.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln[1:].strip() for ln in out.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return f"{' / '.join(minus)}  ->  {' / '.join(plus)}"


def main() -> None:
    rows = _results()
    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for name, status in rows:
        per[_module(name)][status] += 1
    total: collections.Counter[str] = collections.Counter()
    print("| module | mutants | killed | survived | no tests | timeout | score |")
    print("|---|---|---|---|---|---|---|")
    for mod in sorted(per):
        c = per[mod]
        total.update(c)
        n = sum(c.values())
        killed = c["killed"] + c["timeout"]
        print(f"| {mod} | {n} | {c['killed']} | {c['survived']} | {c['no tests']} | "
              f"{c['timeout']} | {killed / n:.1%} |")
    n = sum(total.values())
    print(f"| total | {n} | {total['killed']} | {total['survived']} | {total['no tests']} | "
          f"{total['timeout']} | {(total['killed'] + total['timeout']) / n:.1%} |")
    if "--survivors" in sys.argv:
        for name, status in rows:
            if status in ("survived", "no tests"):
                print(f"{status}\t{name}\t{_diff(name)}")


if __name__ == "__main__":
    main()
