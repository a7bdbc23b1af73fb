"""The agents' plans as the daemon holds them: one object for each part they have in common.

Every agent's plan lists every Tool of the bundle (its own, and the rest as its registry) and
every agent of the swarm, each built afresh per agent. In a swarm of hundreds of agents that is
the same Tool plans and the same list held hundreds of times over (about 85 KiB per agent with
the built-in tools alone). Plans are frozen, so equal parts can be one object.
"""

from __future__ import annotations

from bundle.plan import AgentPlan, ModelPlan, ToolPlan


class SharedParts:
    """Hands out one object for each set of equal plan parts seen so far.

    Share each plan as it is built (:meth:`share`), so the copies it drops are freed before
    the next plan is built and their memory serves it.
    """

    def __init__(self) -> None:
        self._tools: dict[str, ToolPlan] = {}
        self._models: dict[str, ModelPlan] = {}
        self._agent_lists: dict[tuple[str, ...], list[str]] = {}

    def share(self, plan: AgentPlan) -> AgentPlan:
        """``plan`` (equal to it) with its Tool plans, model plan and list of agents replaced
        by the equal ones seen before."""
        return plan.model_copy(
            update={
                "tools": [self._tool(t) for t in plan.tools],
                "registry_tools": [self._tool(t) for t in plan.registry_tools],
                "model": self._models.setdefault(plan.model.model_dump_json(), plan.model),
                "agents": self._agent_lists.setdefault(tuple(plan.agents), plan.agents),
            }
        )

    def _tool(self, plan: ToolPlan) -> ToolPlan:
        return self._tools.setdefault(plan.model_dump_json(), plan)
