"""Which plan to train a model with on a GPU cluster: `search` and its answer, `Plans`.

The caller's side of the plan search: a sample's shapes, the step counted once in a child,
the model's card, the ranked plans and why the best wins. The arithmetic itself is pure and
lives in `planning/plan_search.py`.
"""

from .plan_runs import PlanRuns
from .plans import Plans, RankedPlan
from .search import plans_of, search, search_experiment

__all__ = ["PlanRuns", "Plans", "RankedPlan", "plans_of", "search", "search_experiment"]
