"""OAR: outcome-grounded advantage reshaping for GRPO."""
