"""The edit engine convert and lint --fix share: a `Plan` of edits keyed by nodes of the parsed
tree, applied in one pass (`plan.py`, `rebuild.py`), import edits (`imports.py`), and the
snippets edits are made of (`snippets.py`, `no_sync.py`)."""

from ddpify.edit.no_sync import wrap_micro_steps
from ddpify.edit.plan import BLANK, Note, Plan
from ddpify.edit.snippets import add_keyword, appended, keyword, statements

__all__ = ["BLANK", "Note", "Plan", "add_keyword", "appended", "keyword", "statements", "wrap_micro_steps"]
