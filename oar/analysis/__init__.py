"""Results of finished runs: one module per question (its reading of the run outputs, its statistics and
its table), the shared readings and table helpers, the causal oracle, figures and explanations."""
