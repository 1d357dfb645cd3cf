"""`python -m parallel_wan.plan …`: the command line of the memory planner (memory_plan/),
under the name users type. Nothing else lives here."""
