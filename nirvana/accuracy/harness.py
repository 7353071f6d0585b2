"""Run accuracy tasks through lm-evaluation-harness on the model in memory.

`run_accuracy(model, tokenizer, "zeroshot7,lambada,mbpp", limit=200)` wraps the model as the
harness's `HFLM(pretrained=model, tokenizer=tokenizer, batch_size=..., backend=...)` (`harness_lm`:
"seq2seq" for a T5, whose encoder reads the context and decoder scores each continuation; "causal"
otherwise, the only backend the shared-prefix optimisation `prefix` applies to) and evaluates each task
with `simple_evaluate` on the harness's own config (`nirvana.accuracy.tasks.harness_config`).
Per task it reports acc, acc_norm and their standard errors (the harness's: sample standard
deviation / sqrt(n)), LAMBADA perplexity, pass@1 for code, n, the data source and split, the
harness version, the seconds taken and examples per second; then the 7-task average of the
paper's metric per task (`average_zeroshot7`). GSM8K (`gsm8k`) adds exact match (strict and
flexible extraction); gold bits-per-byte tasks (`*_bpb`, `nirvana.accuracy.gold`) add `bpb`, its
standard error and each problem's value (`bpb_per_example`, for differences paired by problem);
code and GSM8K rows keep each problem's greedy generation (`completions`, in problem order), and code
rows each problem's outcome (`passed`, 1 or 0, for differences paired by problem).
Generation is batched, with the same greedy outputs as one problem at a time
(tests/test_batched_generation.py, tests/test_continuous.py). Where the model qualifies (a causal model whose
cache `continuous` knows how to edit, every causal family here; plain greedy decoding:
`MeteredHFLM._continuous_plan`) it is continuous:
`batch_size` rows decode together and a finished row's slot takes the next problem at once
(`nirvana.accuracy.continuous`), so a batch no longer waits for its longest row. Otherwise lm-eval's static
batches (`batch_size` problems per `generate`, left-padded), with two changes: each row stops at its own stop
string (`nirvana.accuracy.stops`: lm-eval's criteria answer for the whole batch, so a batch whose rows ended on
different stop strings ran to `max_gen_toks`, 1,024 for HumanEval; tests/test_row_stops.py), and the prompt
prefix every problem shares (MBPP's 3 examples, GSM8K's 8) runs once per task (`prefix.prefix_first`: rows as
[prefix][padding][rest]). Continuous batching stops at the same stop strings and reuses the same prefix cache.

Each task's result is cached on its own by content key (model fingerprint, task, limit, few-shot,
harness version, data source and package version, prompt schema), written only once the task has
finished: a repeat is instant, and a run stopped through `should_stop` (checked before every
forward batch) raises `Stopped` without leaving a result for the unfinished task. A generation task
(code, GSM8K) also journals each completion as it is produced (`nirvana.store.journal`, beside the
cache file): a stopped or killed task resumes where it was, generating only what the journal lacks.
Its completions are then produced in batches of a different make-up than one uninterrupted run's;
greedy outputs do not depend on it (the batched == one-at-a-time test above).
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import torch
from tqdm import tqdm

from nirvana.accuracy import continuous, data, gold, prefix, sandbox
from nirvana.accuracy.mbpp import SandboxedPassAt1, passes, replay_lm
from nirvana.accuracy.tasks import (
    PAPER_METRIC,
    SOURCES,
    TASKS,
    ZEROSHOT7,
    check_limit,
    harness_config,
    harness_version,
    resolve_tasks,
)
from nirvana.checkpoints.options import hub_reachable
from nirvana.errors import DatasetNotFound, InvalidInput, Stopped
from nirvana.models.family import family
from nirvana.models.fingerprint import model_fingerprint
from nirvana.progress import Progress
from nirvana.store.evalcache import eval_cache_path, load_cached, save_cached
from nirvana.store.journal import Journal, request_key

SCHEMA = 1  # bump when what a cached task result holds or means changes
METRIC_NOTE = (
    "acc: the choice with the highest summed log-likelihood; acc_norm: that log-likelihood divided by the "
    "choice's length in characters (lm-eval's definitions). The 7-task average uses the paper's metric per task "
    "(LLM-Pruner's protocol: acc for arc_easy, boolq, piqa, winogrande; acc_norm for arc_challenge, hellaswag, "
    "openbookqa)."
)


class _Meter:
    """Counts forward rows for progress, and raises Stopped when the caller asks."""

    def __init__(self, progress: Progress, should_stop: Callable[[], bool] | None):
        self.progress, self.should_stop = progress, should_stop
        self.start = self.span = 0.0
        self.expected = 1.0
        self.rows = 0
        self.label = ""

    def begin(self, start: float, span: float, expected_rows: float, label: str) -> None:
        self.start, self.span, self.expected, self.rows, self.label = start, span, max(1.0, expected_rows), 0, label

    def tick(self, rows: int) -> None:
        if self.should_stop is not None and self.should_stop():
            raise Stopped(
                f"stopped during {self.label}; its result was not saved (finished tasks stay cached; a generation "
                "task keeps its finished completions, and a rerun continues from them)."
            )
        self.rows += rows
        if self.progress:
            done = min(0.99, self.rows / self.expected)
            self.progress(self.start + self.span * done, f"{self.label}: ~{done:.0%}")


class _JournalHook:
    """lm-eval's per-result cache hook, that also appends each generated completion to a journal."""

    def __init__(self, journal: Journal, inner):
        self.journal, self.inner = journal, inner

    def add_partial(self, attr: str, req, res) -> None:
        if attr == "generate_until":
            self.journal.append(request_key(req[0]), res)
        self.inner.add_partial(attr, req, res)


@lru_cache(maxsize=1)
def _lm_class():
    # here, not at the top: lm-eval is optional (zero-shot tasks only) and slow to import
    from lm_eval.models.huggingface import HFLM  # heavy, and optional for the rest of the package
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
    from transformers import StoppingCriteriaList

    from nirvana.accuracy.stops import RowStops, StopStrings  # imports transformers

    class MeteredHFLM(HFLM):
        """HFLM that reports each forward batch to a `_Meter` (progress and stop), and honours `max_gen_toks`:
        lm-eval 0.4.13's HFLM fixes that property at 256 and drops the keyword of an already-built model."""

        meter: _Meter | None = None
        journal: Journal | None = None  # a generation task's finished completions (`nirvana.store.journal`)
        resumed = 0  # completions the last journaled `generate_until` took from its journal
        generation_batch_size: int | None = None  # rows generating at once (None: `batch_size`)
        _prompt_prefix = None  # (tokens, KV cache) of the prompt prefix the last generation batches shared

        def __init__(self, *args, max_gen_toks: int | None = None, **kwargs):
            self._gen_cap = max_gen_toks  # before HFLM's own __init__, which may read the property
            super().__init__(*args, **kwargs)

        @property
        def max_gen_toks(self) -> int:
            return self._gen_cap or super().max_gen_toks

        def _model_call(self, inps, attn_mask=None, labels=None):
            if self.meter is not None:
                self.meter.tick(int(inps.shape[0]))
            return super()._model_call(inps, attn_mask=attn_mask, labels=labels)

        def _loglikelihood_tokens(self, requests, disable_tqdm=False, override_bs=None):
            """lm-eval's requests; a call whose requests share a long prompt prefix runs it once (`prefix`)."""
            shared = prefix.shared_prefix(requests, self.max_length) if self.backend == "causal" else 0
            if not shared or not isinstance(self.batch_size, int):
                return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
            return prefix.score_shared_prefix(
                self._forward_cached,
                requests,
                shared,
                self.batch_size,
                device=self.device,
                softmax_dtype=self.softmax_dtype,
                on_answer=lambda key, answer: self.cache_hook.add_partial("loglikelihood", key, answer),
            )

        def _forward_cached(self, inps, cache):
            if self.meter is not None:
                self.meter.tick(int(inps.shape[0]))
            with torch.no_grad():
                out = self.model(input_ids=inps, cache=cache, use_cache=True)
            return out.logits, out.cache

        def _model_generate(self, context, max_length, stop, **kwargs):
            """lm-eval's `generate` call, with its stop strings checked per row (`stops.RowStops`): a batch ends
            when its last row has finished, not when every row has produced one same stop string."""
            if self.meter is not None:
                self.meter.tick(int(context.shape[0]))
            if self.backend != "causal":  # a T5 generates decoder tokens only; lm-eval's own path
                return super()._model_generate(context, max_length, stop, **kwargs)
            kwargs = _sampling_defaults(kwargs)
            shared, cache = self._generation_prefix(context, kwargs.get("attention_mask"))
            if shared:  # rows rewritten as [prefix][padding][rest], the prefix's keys and values computed once
                context, kwargs["attention_mask"] = shared
                kwargs["cache"] = cache
            rows = RowStops(self.tokenizer, stop, context.shape[1], context.shape[0])
            with torch.autocast(
                device_type=self.device.type,
                dtype=self.mixed_precision_dtype,
                enabled=self.mixed_precision_dtype is not None,
            ):
                return self.model.generate(
                    input_ids=context,
                    max_length=max_length,
                    stopping_criteria=StoppingCriteriaList([rows]),
                    pad_token_id=self.tokenizer.pad_token_id,
                    use_cache=True,
                    **kwargs,
                )

        def _generation_prefix(self, context, mask):
            """((ids, mask) with each row's shared prompt prefix first, a copy of that prefix's cache for every
            row), or (None, None) where the prompts share too little (`prefix.generation_prefix`) or the model
            has sliding-window layers. The prefix's cache is kept for the task's next batches."""
            if mask is None or prefix.uses_sliding_window(self.model):
                return None, None
            rows = prefix.unpadded_rows(context, mask)
            known = self._prompt_prefix[0] if self._prompt_prefix else ()
            length = prefix.generation_prefix(rows, known)
            if not length:
                return None, None
            cache = copy.deepcopy(self._prefix_cache(rows[0][:length]))
            if len(rows) > 1:
                cache.batch_repeat_interleave(len(rows))
            pad = self.tokenizer.pad_token_id
            return prefix.prefix_first(rows, length, context.shape[1], pad, device=context.device), cache

        def _prefix_cache(self, tokens: list[int]):
            """The KV cache of the prompt prefix `tokens` at batch size 1, computed once and kept while the
            prompts go on sharing it (the task's next batches)."""
            if self._prompt_prefix is None or list(self._prompt_prefix[0]) != tokens:
                ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
                keeps = "logits_to_keep" in inspect.signature(self.model.forward).parameters
                last = {"logits_to_keep": 1} if keeps else {}
                with torch.no_grad():  # only the cache is wanted: not the [P, vocabulary] logits
                    self._prompt_prefix = (tokens, self.model(input_ids=ids, use_cache=True, **last).cache)
            return self._prompt_prefix[1]

        def _continuous_plan(self, requests):
            """(gen_kwargs, stop strings, max_gen_toks) where the requests can be generated by continuous
            batching (`continuous`: a causal model whose cache it can edit, one plain greedy setting for all,
            an integer batch size, no thinking tokens); None for lm-eval's batches."""
            if not requests or self.backend != "causal" or not isinstance(self.batch_size, int):
                return None
            gen_kwargs = requests[0].args[1]
            if self.think_end_token is not None or any(r.args[1] != gen_kwargs for r in requests):
                return None
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen_toks = kwargs.pop("max_gen_toks")
            if "max_length" in kwargs or max_gen_toks < 1 or self.max_length - max_gen_toks < 1:
                return None  # lm-eval's path, with its own warning or error
            if not continuous.plain_greedy(self.model, **_sampling_defaults(kwargs)):
                return None
            return (gen_kwargs, until, max_gen_toks) if continuous.qualifies(self.model) else None

        def _generate_continuous(self, requests, gen_kwargs, until, max_gen_toks, slots: int, disable_tqdm=False):
            """lm-eval's `generate_until` for these requests, by continuous batching: each context encoded and
            truncated as lm-eval does, generated greedily with `slots` rows at a time, decoded and cut at its
            first stop string as lm-eval does (`postprocess_generated_text`); each result goes to the cache hook
            (and so the journal) as its row finishes."""
            contexts = [r.args[0] for r in requests]
            room = self.max_length - max_gen_toks  # lm-eval's context budget
            encoded = (self.tok_batch_encode([c], left_truncate_len=room, truncation=self.truncation) for c in contexts)
            prompts = [ids[0].tolist() for ids, _ in encoded]
            known = self._prompt_prefix[0] if self._prompt_prefix else ()
            length = prefix.generation_prefix(prompts, known)
            shared = (prompts[0][:length], self._prefix_cache(prompts[0][:length])) if length else None
            results: list[str | None] = [None] * len(requests)
            bar = tqdm(total=len(requests), disable=disable_tqdm, desc="Running generate_until requests")

            def finish(i: int, tokens: list[int]) -> None:
                text = postprocess_generated_text(generation=self.tok_decode(tokens), stop=until, think_end_token=None)
                results[i] = text
                self.cache_hook.add_partial("generate_until", (contexts[i], gen_kwargs), text)
                bar.update(1)
                if self.meter is not None:
                    self.meter.tick(1)

            def step(rows: int) -> None:
                if self.meter is not None:
                    self.meter.tick(0)  # progress, and a stop asked for between steps

            autocast = torch.autocast(
                device_type=self.device.type,
                dtype=self.mixed_precision_dtype,
                enabled=self.mixed_precision_dtype is not None,
            )
            try:
                with autocast:
                    continuous.greedy_continuous(
                        self.model,
                        prompts,
                        max_new=max_gen_toks,
                        slots=slots,
                        finished=StopStrings(self.tokenizer, until),
                        prefix=shared,
                        on_done=finish,
                        on_step=step,
                    )
            finally:  # a stop (`Stopped` from the meter) closes the bar too
                bar.close()
            return results

        def _generate(self, requests, disable_tqdm=False):
            """The completions of `requests`, `generation_batch_size` rows at a time (continuous where it
            qualifies, else lm-eval's static batches of that many; its log-likelihood batches keep `batch_size`)."""
            rows = self.generation_batch_size or self.batch_size
            plan = self._continuous_plan(requests)
            if plan is not None:
                return self._generate_continuous(requests, *plan, slots=rows, disable_tqdm=disable_tqdm)
            scoring, self.batch_size_per_gpu = self.batch_size_per_gpu, rows  # lm-eval reads `batch_size`
            try:
                return super().generate_until(requests, disable_tqdm=disable_tqdm)
            finally:
                self.batch_size_per_gpu = scoring

        def generate_until(self, requests, disable_tqdm=False):
            """lm-eval's greedy generation, by continuous batching where it qualifies (`_continuous_plan`); with a
            `journal`, each completion is appended to it as it is produced and a request it already holds is not
            generated again (a stopped or killed task resumes)."""
            if self.journal is None:
                return self._generate(requests, disable_tqdm=disable_tqdm)
            done = self.journal.read()
            keys = [request_key(r.args[0]) for r in requests]
            missing = [(r, k) for r, k in zip(requests, keys, strict=True) if k not in done]
            todo = [r for r, _ in missing]
            self.resumed = len(requests) - len(todo)
            if self.meter is not None and len(todo) < len(requests):
                self.meter.tick(len(requests) - len(todo))
            outer = self.cache_hook
            self.cache_hook = _JournalHook(self.journal, outer)
            try:
                fresh = self._generate(todo, disable_tqdm=disable_tqdm) if todo else []
            finally:
                self.cache_hook = outer
            done.update({k: c for (_, k), c in zip(missing, fresh, strict=True)})
            return [done[k] for k in keys]

    return MeteredHFLM


def _sampling_defaults(kwargs: dict) -> dict:
    """lm-eval's sampling defaults for `generate`: greedy unless the task asks for a temperature."""
    kwargs = dict(kwargs)
    kwargs["temperature"] = temperature = kwargs.get("temperature", 0.0)
    if temperature == 0.0 and kwargs.get("do_sample") is None:
        kwargs["do_sample"] = False
    if kwargs.get("do_sample") is False and temperature == 0.0:
        kwargs.pop("temperature")
    return kwargs


def harness_backend(model) -> str:
    """lm-eval's backend for `model`: "seq2seq" for a T5 encoder-decoder (the encoder reads the context, the
    decoder scores the continuation under teacher forcing), "causal" for every decoder-only model."""
    return family(model).harness


def harness_lm(model, tokenizer, *, batch_size: int = 8, **kwargs):
    """The in-memory model as lm-eval's `HFLM` (metered: progress and stop), on the backend its family needs.

    Example (a T5 scores `loglikelihood` requests through lm-eval's seq2seq path):
        >>> lm = harness_lm(t5, tokenizer, batch_size=4)
        >>> lm.backend
        'seq2seq'
    """
    return _lm_class()(
        pretrained=model, tokenizer=tokenizer, batch_size=batch_size, backend=harness_backend(model), **kwargs
    )


@lru_cache(maxsize=1)
def _task_manager():
    """A TaskManager without the built-in index (indexing 14k YAMLs takes ~20 s): tasks come as config dicts."""
    # here, not at the top: lm-eval is optional (zero-shot tasks only) and slow to import
    from lm_eval.tasks import TaskManager

    return TaskManager(include_defaults=False)


def resolve_source(source: str) -> str:
    """ "local" or "hub": `auto` is the hub when it is reachable and not switched off, else the local files."""
    if source not in SOURCES:
        raise InvalidInput(f"--source must be one of {', '.join(SOURCES)}, got {source!r}.")
    if source != "auto":
        return source
    offline = os.environ.get("HF_DATASETS_OFFLINE", "").lower() in {"1", "true", "yes"}
    return "hub" if not offline and hub_reachable() else "local"


def check_tokenizer(model, tokenizer, names: list[str]) -> None:
    """A clear InvalidInput when this tokenizer cannot drive the tasks on this model."""
    if tokenizer is None or not callable(getattr(tokenizer, "encode", None)):
        raise InvalidInput(
            "accuracy tasks need the model's Hugging Face tokenizer (an object with encode/decode), "
            f"got {type(tokenizer).__name__}. Load the model with nirvana.checkpoints.loading.load_model, "
            "which returns both."
        )
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    if vocab and size and size > vocab:
        raise InvalidInput(
            f"the tokenizer has {size} tokens but the model embeds only {vocab}: they belong to different models. "
            "Use the tokenizer saved with this model."
        )
    try:
        ids = tokenizer.encode(" yes", add_special_tokens=False)
    except Exception as exc:  # a tokenizer that cannot even encode a word
        raise InvalidInput(f"the tokenizer cannot encode text ({type(exc).__name__}: {exc}).") from exc
    if not ids:
        raise InvalidInput("the tokenizer encodes ' yes' to no tokens, so it cannot score answer choices.")
    if any(TASKS[n].kind in ("code", "generate") for n in names) and getattr(tokenizer, "eos_token_id", None) is None:
        raise InvalidInput("code and GSM8K tasks generate text and need a tokenizer with an end-of-sequence token.")


# lm-eval reports "metric,filter"; the filters kept and the suffix each gets in our rows
# (GSM8K: strict-match is lm-eval's headline "The answer is N." extraction, flexible-extract the last number).
FILTER_SUFFIX = {"none": "", "create_test": "", "strict-match": "", "flexible-extract": "_flexible"}


def _metrics(raw: dict) -> dict:
    out = {}
    for key, value in raw.items():
        if "," not in key or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        metric, filt = key.split(",", 1)
        metric = metric.replace("pass_at_1", "pass@1")
        if filt in FILTER_SUFFIX:
            base, stderr = (metric[: -len("_stderr")], "_stderr") if metric.endswith("_stderr") else (metric, "")
            out[f"{base}{FILTER_SUFFIX[filt]}{stderr}"] = float(value)
    return out


def _cache_path(fingerprint: str, name: str, limit, fewshot: int, version: str, source: str, extra) -> object:
    data_id = f"{data.PACKAGE}=={data.package_version()}" if source == "local" else "hub"
    return eval_cache_path("accuracy", fingerprint, name, limit, fewshot, version, source, data_id, SCHEMA, extra)


@contextmanager
def _quiet_harness():
    """lm-eval logs a warning per task about custom datasets; keep its errors, drop the chatter."""
    logger = logging.getLogger("lm_eval")
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


# Kinds whose per-problem samples are logged: gold BPB (each problem's value, for paired tests) and the
# generating kinds (each problem's greedy completion, for reading them and for batch == one-at-a-time checks).
LOGGED_KINDS = ("bpb", "code", "generate")


def completions(out: dict, name: str) -> list[str]:
    """Each problem's raw greedy generation, in problem order (one per problem, whatever the filters)."""
    by_doc = {}
    for sample in out.get("samples", {}).get(name, []):
        by_doc.setdefault(sample["doc_id"], sample["resps"][0][0])
    return [by_doc[k] for k in sorted(by_doc)]


def _run_one(lm, name: str, source: str, limit, code_metric, confirm_code: bool) -> tuple[dict, float]:
    """One task through `simple_evaluate`; the kinds in LOGGED_KINDS log their samples."""
    # here, not at the top: lm-eval is optional (zero-shot tasks only) and slow to import
    from lm_eval import simple_evaluate  # heavy; only when a task actually runs

    cfg = harness_config(name, source, code_metric=code_metric)
    start = time.perf_counter()
    try:
        with _quiet_harness():
            out = simple_evaluate(
                model=lm,
                tasks=[cfg],
                limit=limit,
                task_manager=_task_manager(),
                log_samples=TASKS[name].kind in LOGGED_KINDS,
                bootstrap_iters=1000,
                confirm_run_unsafe_code=confirm_code,
            )
    except (ConnectionError, FileNotFoundError) as exc:
        raise DatasetNotFound(
            f"lm-eval could not load the data of {name} from the {source} source ({type(exc).__name__}: "
            f"{str(exc)[:200]}). Offline, use --source local (needs `{data.INSTALL}`)."
        ) from exc
    except IndexError as exc:
        if "out of range" in str(exc):
            raise InvalidInput(
                f"{name}: the tokenizer produced ids the model cannot embed ({exc}); use this model's own tokenizer."
            ) from exc
        raise
    return out, time.perf_counter() - start


def with_passes(row: dict, name: str, source: str, limit, metric: SandboxedPassAt1) -> dict:
    """A code row cached before per-problem outcomes were kept, with them: its own completions go through the
    task's filters and the sandboxed `metric` again (no model; seconds per problem). They are kept only when they
    give the cached pass@1 again; otherwise (a test near its time limit on a loaded machine) `passed` is None and
    `passed_note` says why, so no paired difference rests on outcomes that differ from the row's."""
    out, _ = _run_one(replay_lm(row["completions"]), name, source, limit, metric, confirm_code=True)
    replayed = passes(out, name)
    again = sum(replayed) / len(replayed) if replayed else None
    if again is not None and len(replayed) == row.get("n") and math.isclose(again, row.get("pass@1") or 0.0):
        return {**row, "passed": replayed, "passed_note": "replayed from the cached completions"}
    note = f"replaying the cached completions gave pass@1 {again} on {len(replayed)}, not {row.get('pass@1')}"
    return {**row, "passed": None, "passed_note": note}


def _row(name: str, out: dict, seconds: float, source: str, version: str, fewshot: int, limit) -> dict:
    metrics = _metrics(out["results"].get(name, {}))
    n = out.get("n-samples", {}).get(name, {})
    effective = n.get("effective")
    spec = TASKS[name]
    if source == "local":
        src = data.LOCAL_SOURCES[name]
        split, origin = src.harness_split, data.describe(name)
        split_note = "" if src.same_split else f"lm-eval uses {src.harness_split}; the package has only {src.split}"
    else:
        split, origin, split_note = "(as the harness YAML)", "Hugging Face hub, dataset of the harness YAML", ""
    row = {
        "task": name,
        **{k: metrics.get(k) for k in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr")},
        "n": effective,
        "n_available": n.get("original"),
        "limit": limit,
        "num_fewshot": fewshot,
        "source": source,
        "data": origin,
        "split": split,
        "split_note": split_note,
        "harness": "lm-evaluation-harness",
        "harness_version": version,
        "paper_metric": spec.paper_metric,
        "seconds": round(seconds, 2),
        "examples_per_s": round(effective / seconds, 3) if effective and seconds > 0 else None,
    }
    if spec.kind == "loglikelihood":
        row["perplexity"] = metrics.get("perplexity")
        row["perplexity_stderr"] = metrics.get("perplexity_stderr")
    if spec.kind == "code":
        row["pass@1"] = metrics.get("pass@1")
        row["pass@1_stderr"] = metrics.get("pass@1_stderr")
    if spec.kind == "generate":
        for k in ("exact_match", "exact_match_stderr", "exact_match_flexible", "exact_match_flexible_stderr"):
            row[k] = metrics.get(k)
    if spec.kind in ("code", "generate"):
        row["completions"] = completions(out, name)
    if spec.kind == "code":
        row["passed"] = passes(out, name)
    if spec.kind == "bpb":
        row["bpb"], row["bpb_stderr"] = metrics.get("bpb"), metrics.get("bpb_stderr")
        row["reference"] = f"OLMES {gold.GOLD_FORMATS[name].reference}, the request file's prompt and gold answer"
        samples = sorted(out.get("samples", {}).get(name, []), key=lambda x: x["doc_id"])
        row["bpb_per_example"] = [round(float(x["bpb"]), 6) for x in samples]
    return row


def average_zeroshot7(task_rows: dict) -> dict | None:
    """Mean of the paper's metric over the seven zero-shot tasks, with its standard error
    sqrt(sum se_i^2) / 7 (tasks independent); None unless all seven are present."""
    if not all(t in task_rows and task_rows[t].get(PAPER_METRIC[t]) is not None for t in ZEROSHOT7):
        return None
    values = [float(task_rows[t][PAPER_METRIC[t]]) for t in ZEROSHOT7]
    ses = [task_rows[t].get(f"{PAPER_METRIC[t]}_stderr") for t in ZEROSHOT7]
    stderr = math.sqrt(sum(float(s) ** 2 for s in ses)) / len(ses) if all(s is not None for s in ses) else None
    return {
        "value": sum(values) / len(values),
        "stderr": stderr,
        "metrics": dict(PAPER_METRIC),
        "n": {t: task_rows[t].get("n") for t in ZEROSHOT7},
    }


def check_request(
    tasks,
    limit,
    batch_size,
    source,
    allow_code_execution,
    allow_unsandboxed: bool = False,
    rows: int | None = None,
) -> tuple[list[str], int | None]:
    """Validate everything that needs no model: (task names, limit), or InvalidInput (SandboxUnavailable
    when a code task would run without OS isolation and `allow_unsandboxed` is False). `rows`: the generation
    batch size (None: the batch size's)."""
    names = resolve_tasks(tasks)
    limit = check_limit(limit)
    for what, value in (("batch size", batch_size), ("generation batch size (rows generating at once)", rows)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidInput(f"{what} must be a positive integer, got {value!r}.")
    if source not in SOURCES:
        raise InvalidInput(f"--source must be one of {', '.join(SOURCES)}, got {source!r}.")
    for n in names:
        if TASKS[n].kind == "code":
            sandbox.require_opt_in(allow_code_execution, n)
            sandbox.require_isolation(allow_unsandboxed)
    gold_tasks = [n for n in names if TASKS[n].kind == "bpb"]
    if source == "hub" and gold_tasks:
        raise InvalidInput(
            f"{', '.join(gold_tasks)} score the reference suite's own few-shot prompts and gold answers, which ship "
            f"only in the local files ({data.PACKAGE}=={data.PACKAGE_VERSION}); use --source local or auto."
        )
    return names, limit


def task_source(name: str, where: str) -> str:
    """Where task `name` reads from when the run resolved to `where`: gold-BPB tasks are always local."""
    return "local" if TASKS[name].kind == "bpb" else where


def run_accuracy(
    model,
    tokenizer,
    tasks="zeroshot7",
    *,
    limit: int | None = None,
    batch_size: int = 8,
    generation_batch_size: int | None = None,
    source: str = "auto",
    allow_code_execution: bool = False,
    use_cache: bool = True,
    progress: Progress = None,
    should_stop: Callable[[], bool] | None = None,
    sandbox_limits: sandbox.Limits | None = None,
    max_gen_toks: int | None = None,
    allow_unsandboxed: bool = False,
    cached_only: bool = False,
    journal_dir: str | Path | None = None,
) -> dict:
    """Accuracy of `model` on lm-eval tasks: {"tasks": {name: {...}}, "average": {...} | None, ...}.

    `tasks`: names, groups (`zeroshot7`) or aliases (`lambada`), as a list or comma string.
    `limit`: the first N examples of each task (None: all). `batch_size`: requests per log-likelihood forward;
    `generation_batch_size`: rows generating at once in MBPP/HumanEval/GSM8K (None: `batch_size`; the completions
    do not depend on it, only the time: benchmarks/generation/step_cost.py). `max_gen_toks` caps generated tokens of
    code and chain-of-thought tasks (None: the harness's 256). Generated code runs only in OS isolation
    (bubblewrap) unless `allow_unsandboxed` (CLI --unsafe-exec-without-sandbox); each code task's row records
    which. `cached_only`: only the tasks whose result is already cached (the others are left out of "tasks";
    nothing generates). `journal_dir`: where a generation task journals its completions (default: beside its
    cache file; a benchmark passes its own folder, so an unfinished task can be committed and resumed on another
    machine: the journal's name is the task's cache key). Example:
        >>> r = run_accuracy(lm.model, lm.tokenizer, "zeroshot7", limit=200, source="local")
        >>> r["tasks"]["piqa"]["acc"], r["average"]["value"]
    """
    names, limit = check_request(
        tasks, limit, batch_size, source, allow_code_execution, allow_unsandboxed, generation_batch_size
    )
    rows_at_once = generation_batch_size or batch_size
    version = harness_version()
    where = resolve_source(source)
    sources = {n: task_source(n, where) for n in names}
    for n in names:  # every local file is read and counted before anything runs or is cached
        if sources[n] == "local":
            data.load_docs(n)
    check_tokenizer(model, tokenizer, names)
    fingerprint = model_fingerprint(model)
    limits = sandbox_limits or sandbox.Limits()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    total_rows = {
        n: TASKS[n].requests_per_doc
        * min(limit or data.LOCAL_SOURCES[n].count, data.LOCAL_SOURCES[n].count if sources[n] == "local" else 10**9)
        for n in names
    }
    weight = sum(total_rows.values())
    meter = _Meter(progress, should_stop)
    lm = None
    rows: dict[str, dict] = {}
    hits: list[str] = []
    start_all = time.perf_counter()
    done_weight = 0.0
    for name in names:
        spec = TASKS[name]
        extra = None
        if spec.kind == "code":  # a result is reused only under the same limits and the same isolation
            iso = sandbox.isolation(allow_unsandboxed)["isolation"]
            extra = {"sandbox": limits.__dict__, "max_gen_toks": max_gen_toks, "isolation": iso}
        elif spec.kind == "generate" and max_gen_toks:  # a capped run is its own result; uncapped keys unchanged
            extra = {"max_gen_toks": max_gen_toks}
        task_where = sources[name]
        path = _cache_path(fingerprint, name, limit, spec.default_fewshot, version, task_where, extra)
        cached = load_cached(path) if use_cache else None
        if cached is not None and spec.kind == "code" and "passed" not in cached:
            if progress:
                progress(done_weight / weight, f"{name}: replaying {len(cached['completions'])} cached completions")
            cached = with_passes(
                cached, name, task_where, limit, SandboxedPassAt1(limits, allow_unsandboxed=allow_unsandboxed)
            )
            save_cached(path, cached)
        if cached is not None:
            rows[name] = {**cached, "cache_hit": True}
            hits.append(name)
        elif not cached_only:
            if should_stop is not None and should_stop():
                raise Stopped(f"stopped before {name}; finished tasks stay cached.")
            if lm is None:
                kwargs = {"max_gen_toks": max_gen_toks} if max_gen_toks else {}
                lm = harness_lm(model, tokenizer, batch_size=batch_size, **kwargs)
                lm.generation_batch_size = rows_at_once
            lm.meter = meter
            meter.begin(done_weight / weight, total_rows[name] / weight, total_rows[name], name)
            if progress:
                progress(done_weight / weight, f"lm-eval {version}: {name} ({task_where} data)")
            metric = SandboxedPassAt1(limits, allow_unsandboxed=allow_unsandboxed) if spec.kind == "code" else None
            generates = spec.kind in ("code", "generate")
            where_journal = Path(journal_dir) if journal_dir is not None else path.parent
            journal = Journal(where_journal / f"{path.stem}.partial.jsonl") if use_cache and generates else None
            lm.journal, lm.resumed = journal, 0
            was_training = model.training
            model.eval()
            try:
                out, seconds = _run_one(lm, name, task_where, limit, metric, confirm_code=spec.kind == "code")
            finally:
                model.train(was_training)
                lm.meter = lm.journal = None
            row = _row(name, out, seconds, task_where, version, spec.default_fewshot, limit)
            if generates:  # what the time depends on (the completions do not)
                row["generation_batch_size"] = rows_at_once
            if lm.resumed:  # `seconds` is this run's: the journaled completions' time is not in it
                row["resumed_completions"] = lm.resumed
            if metric is not None:
                row["sandbox"] = {
                    "outcomes": dict(metric.statuses),
                    "ran_under": sorted(metric.isolation),
                    **sandbox.isolation(allow_unsandboxed),
                }
            if use_cache:
                save_cached(path, row)
            if journal is not None:  # the whole result is cached now
                journal.remove()
            rows[name] = {**row, "cache_hit": False}
        done_weight += total_rows[name]
        if progress:
            progress(done_weight / weight, f"{name} done")
    return {
        "harness": "lm-evaluation-harness",
        "harness_version": version,
        "source": where,
        "tasks": rows,
        "average": average_zeroshot7(rows),
        "average_note": "mean over arc_easy, arc_challenge, boolq, hellaswag, openbookqa, piqa, winogrande of "
        "each task's paper metric (see metrics)",
        "metrics_note": METRIC_NOTE,
        "limit": limit,
        "batch_size": batch_size,
        "generation_batch_size": rows_at_once,
        "fingerprint": fingerprint,
        "cache_hits": hits,
        "seconds": round(time.perf_counter() - start_all, 2),
    }
