"""pass@1 for MBPP and HumanEval: the harness generates, the sandbox runs the tests.

lm-eval's `mbpp` task (3-shot, the prompt "You are an expert Python programmer, and here is your
task: ... Your code should pass these tests: ... [BEGIN]", greedy, stop at "[DONE]") and
`humaneval` (0-shot, the prompt is the function header, stops at a new top-level statement)
produce one completion per problem. Their own metric (Hugging Face evaluate's `code_eval`) would
execute it inside this process; `SandboxedPassAt1` replaces it: the completion runs in one
sandbox of `nirvana.accuracy.sandbox`, the tests in another (calling into it), and it counts 1
only if every assert holds before the time limit. With one greedy sample per problem, pass@1 is
the fraction passed, and each problem's outcome (`passes`, 1 or 0 in problem order) is kept so that two
models scored on the same problems can be compared paired by problem.

`replay_lm(completions)` answers lm-eval's generation requests with recorded completions (by problem), so
a result cached before per-problem outcomes were kept gets them by running its own completions through
the task's filters and the sandbox again, without a model.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from nirvana.accuracy.sandbox import Limits, run_tests

METRIC = "pass_at_1"  # the metric's name in lm-eval's results and logged samples


class SandboxedPassAt1:
    """A metric callable for lm-eval (`references=[tests], predictions=[completion]` -> 0.0 or 1.0)."""

    __name__ = METRIC  # lm-eval names a callable metric by its __name__

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


def passes(out: dict, name: str) -> list[int]:
    """Each problem's outcome under the sandboxed metric (1 passed, 0 not), in problem order, from the
    samples lm-eval logged (one per problem and filter; the code tasks have one filter each)."""
    by_doc: dict[int, int] = {}
    for sample in out.get("samples", {}).get(name, []):
        by_doc.setdefault(sample["doc_id"], int(sample[METRIC]))
    return [by_doc[k] for k in sorted(by_doc)]


@lru_cache(maxsize=1)
def _replay_class():
    # here, not at the top: lm-eval is optional (zero-shot tasks only) and slow to import
    from lm_eval.api.model import LM

    class ReplayLM(LM):
        """lm-eval's model interface whose generations are recorded completions, one per problem."""

        def __init__(self, completions: list[str]):
            super().__init__()
            self.completions = completions

        def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
            return [self.completions[r.doc_id] for r in requests]

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            raise TypeError("a replay answers generation requests only (code tasks)")

        loglikelihood_rolling = loglikelihood

    return ReplayLM


def replay_lm(completions: list[str]):
    """An lm-eval model that answers problem i's generation request with `completions[i]`."""
    return _replay_class()(list(completions))
