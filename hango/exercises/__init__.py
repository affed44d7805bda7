"""``check("02.1", course, result=...)``: the course's exercises, checked against the real system.

Each exercise at the end of a notebook has a check that looks at what the learner *did*: the
files in the database, the requests a run really sent, the warnings and events it recorded. It
prints ``PASS`` with what was verified, or ``NOT YET`` with what is missing and a hint; it never
raises, so a notebook always runs to the end. A pass is kept for the learner, and
``progress(course)`` shows in any notebook what is passed and what comes next. The solutions
live in ``notebooks/solutions/`` and run in CI, so a check and its solution cannot drift apart.
"""


from hango.exercises import agents, basics, cache, prefix, review, skills  # registers every check
from hango.exercises._core import EXERCISES, NOTEBOOKS, Exercise, NotYet, check, exercise, measured
from hango.exercises.basics import below_minimum
from hango.exercises.progress import progress

__all__ = ["EXERCISES", "NOTEBOOKS", "Exercise", "NotYet", "below_minimum", "check", "exercise",
           "measured", "progress"]
_NOTEBOOKS = (basics, skills, cache, agents, review, prefix)  # imported for their @exercise registrations
