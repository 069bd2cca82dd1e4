"""GRPO training with OAR: the TRL trainer subclass, one run from its settings, and their helpers."""
