"""pass@1 for MBPP and HumanEval: the harness generates, the sandbox runs the tests.

lm-eval's `mbpp` task (3-shot, the prompt "You are an expert Python programmer, and here is your
task: ... Your code should pass these tests: ... [BEGIN]", greedy, stop at "[DONE]") and
`humaneval` (0-shot, the prompt is the function header, stops at a new top-level statement)
produce one completion per problem. Their own metric (Hugging Face evaluate's `code_eval`) would
execute it inside this process; `SandboxedPassAt1` replaces it: the program
`completion + "\\n" + tests` runs in `nirvana.accuracy.sandbox` and counts 1 only if every assert
holds before the time limit. With one greedy sample per problem, pass@1 is the fraction passed.
"""

from __future__ import annotations

from collections import Counter

from nirvana.accuracy.sandbox import Limits, run_program


class SandboxedPassAt1:
    """A metric callable for lm-eval (`references=[tests], predictions=[completion]` -> 0.0 or 1.0)."""

    __name__ = "pass_at_1"

    def __init__(self, limits: Limits | None = None, progress=None):
        self.limits = limits or Limits()
        self.statuses: Counter = Counter()
        self.progress = progress

    def __call__(self, references, predictions) -> float:
        tests = references[0] if isinstance(references, (list, tuple)) else references
        completion = predictions[0] if isinstance(predictions, (list, tuple)) else predictions
        if isinstance(completion, (list, tuple)):
            completion = completion[0]
        outcome = run_program(f"{completion}\n{tests}\n", self.limits)
        self.statuses[outcome.status] += 1
        if self.progress:
            self.progress(sum(self.statuses.values()), outcome.status)
        return 1.0 if outcome.passed else 0.0
