"""The experiment as a whole: the run registry behind the workflow, the configuration docs and the memory plan."""
