"""The course's pictures, drawn from what a notebook's run really did (matplotlib, on demand).

Each ``draw_*`` returns a :class:`Picture`: JupyterLab shows its PNG, and its text (what nbval
compares, since it skips images) says in words what the picture shows, with the figures it
was drawn from. The PNG is the same bytes on every run: the Agg renderer, the font matplotlib
ships (DejaVu Sans), a fixed resolution, and no metadata (no software version, no date).
"""

from hango.pictures.base import Picture
from hango.pictures.prompt import draw_request, draw_span_tree
from hango.pictures.rules import draw_frontmatter, draw_narrowing, draw_path_rules
from hango.pictures.runs import draw_pace, draw_proposals, draw_tenants

__all__ = ["Picture", "draw_frontmatter", "draw_narrowing", "draw_pace", "draw_path_rules",
           "draw_proposals", "draw_request", "draw_span_tree", "draw_tenants"]
