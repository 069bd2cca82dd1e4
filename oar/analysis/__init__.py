"""Results of finished runs: accuracy and credit summaries, the causal oracle, tables, figures and explanations."""
