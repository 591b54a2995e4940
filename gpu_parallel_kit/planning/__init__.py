"""Which plan to train a model with on a GPU cluster: `search` and its answer, `Plans`.

The caller's side of the plan search: a sample's shapes, the step counted once in a child,
the ranked plans and why the best wins. The arithmetic itself is pure and lives in the cost
model: the model's card (`analysis/cost_model/model_card.py`), each plan's memory and step
(`parallel_plan_memory.py`, `parallel_plan_step_time.py`) and their ranking
(`parallel_plan_ranking.py`).
"""

from .plan_runs import PlanRuns
from .plans import Plans, RankedPlan
from .search import plans_of, search, search_experiment

__all__ = ["PlanRuns", "Plans", "RankedPlan", "plans_of", "search", "search_experiment"]
