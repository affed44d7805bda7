"""Re-execute every notebook in place and drop per-cell timing metadata (``make notebooks``).

Run it after changing hango: the committed outputs are what nbval compares with, so they must
be what the code produces now. Timing metadata changes on every run and would only add noise
to the diff, and so would the way the kernel happened to chunk a cell's prints. Each notebook
runs as the learner ``you`` with no exercise passed yet (its passes are cleared before and
after), so the committed ``progress(course)`` output is a fresh start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def refresh(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = _coalesced(cell.outputs)
    nbformat.write(notebook, path)


def _coalesced(outputs: list) -> list:
    """Consecutive prints to one stream as one output: how the kernel chunks them depends on
    timing, which would only add noise to the diff (nbval joins them the same way)."""
    joined: list = []
    for output in outputs:
        last = joined[-1] if joined else None
        if (output.output_type == "stream" and last is not None and last.output_type == "stream"
                and last.name == output.name):
            last.text += output.text
        else:
            joined.append(output)
    return joined


LEARNER = "you"  # the learner of the committed outputs


def main() -> int:
    from hango.db import Database
    from hango.exercises.progress import forget
    from hango.settings import load_settings

    os.environ.setdefault("IPYKERNEL_CELL_NAME", "<IPY-INPUT>")
    os.environ["HANGO_LEARNER"] = LEARNER
    here = Path(__file__).parent
    paths = [Path(p) for p in sys.argv[1:]] or [
        *sorted(here.glob("[0-9]*.ipynb")), *sorted(here.glob("solutions/[0-9]*.ipynb"))]
    db = Database(load_settings())
    try:
        for path in paths:
            print("executing", path)
            forget(db, LEARNER)
            refresh(path)
        forget(db, LEARNER)
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
