"""The token-credit benchmark: any scorer, by name or import path, on the shipped frozen policies.

- ``response_set``: each frozen policy's fixed responses (the chain task's held-out problems x G = 8,
  sampled once at the training temperature), shipped with their hash, and their probes;
- ``credit``: the ground-truth track, a scorer's ranking of every response's tokens against the parsed
  decisive tokens (recall@k per step, average precision, the erring step against the later right ones);
- ``learning``: the learning track's declared paired analysis of a scorer's runs against GRPO and the
  truth gate;
- ``step_level``: the ground-truth track's step-level scores (first-error localisation, a
  ProcessBench-style F1, the sign of a signed entry);
- ``leaderboard``: the versioned tables both tracks write; ``scores_file``: each entry's per-token scores;
  ``plots``: the leaderboard's and the per-step plots; ``submission``: a row submitted and verified;
- ``python -m oar.bench``: the commands (``credit``, ``learning``, ``responses``, ``plot``, ``submit``,
  ``verify``).
"""
