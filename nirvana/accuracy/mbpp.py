"""pass@1 for MBPP and HumanEval: the harness generates, the sandbox runs the tests.

lm-eval's `mbpp` task (3-shot, the prompt "You are an expert Python programmer, and here is your
task: ... Your code should pass these tests: ... [BEGIN]", greedy, stop at "[DONE]") and
`humaneval` (0-shot, the prompt is the function header, stops at a new top-level statement)
produce one completion per problem. Their own metric (Hugging Face evaluate's `code_eval`) would
execute it inside this process; `SandboxedPassAt1` replaces it: the completion runs in one
sandbox of `nirvana.accuracy.sandbox`, the tests in another (calling into it), and it counts 1
only if every assert holds before the time limit. With one greedy sample per problem, pass@1 is
the fraction passed.
"""

from __future__ import annotations

from collections import Counter

from nirvana.accuracy.sandbox import Limits, run_tests


class SandboxedPassAt1:
    """A metric callable for lm-eval (`references=[tests], predictions=[completion]` -> 0.0 or 1.0)."""

    __name__ = "pass_at_1"

    def __init__(self, limits: Limits | None = None, progress=None, *, allow_unsandboxed: bool = False):
        self.limits = limits or Limits()
        self.allow_unsandboxed = allow_unsandboxed
        self.isolation: set[str] = set()  # the isolation every program ran under (one value in practice)
        self.statuses: Counter = Counter()
        self.progress = progress

    def __call__(self, references, predictions) -> float:
        tests = references[0] if isinstance(references, (list, tuple)) else references
        completion = predictions[0] if isinstance(predictions, (list, tuple)) else predictions
        if isinstance(completion, (list, tuple)):
            completion = completion[0]
        outcome = run_tests(completion, tests, self.limits, allow_unsandboxed=self.allow_unsandboxed)
        self.statuses[outcome.status] += 1
        self.isolation.add(outcome.isolation)
        if self.progress:
            self.progress(sum(self.statuses.values()), outcome.status)
        return 1.0 if outcome.passed else 0.0
