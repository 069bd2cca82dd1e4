"""The verifier behind every reward and accuracy: final-answer extraction and answer equivalence.

Three steps, each usable on its own:

* ``extraction.extract_answer`` finds a response's answer span (method.md section 2) by a cascade: the
  content of the last top-level ``\\boxed{...}``; else (optionally) the answer an explicit statement gives
  ("The answer is 7", "Final answer: 7", "Therefore, the final answer is 7"); else (optionally) the last
  number, widened to the whole LaTeX expression it closes (``\\frac{1}{4}``, ``\\sqrt{5}``, ``(-1, 6)``).
* ``extraction.extract_reference`` turns a dataset's reference (GSM8K ``#### 72`` solutions, MATH
  solutions with a ``\\boxed{}``, AMC floats such as ``27.0``) into a plain answer string.
* ``equivalence.answers_match`` decides equivalence: a cheap normalised/numeric comparison first (percent
  signs, units, thousands separators, times of day, repeating decimals), then ``math_verify`` for
  everything symbolic, run in time-limited helper processes (``symbolic_helper``).

``grader.grade`` does the first and the last for one response.
"""
