"""The experiment as a whole: the run registry behind the workflow, its jobs' resources and options, and the
configuration docs. The planner over it is oar.planning."""
