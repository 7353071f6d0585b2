"""`eval` (measure one model) and `compare` (dense vs pruned, with ratios).

What each family is measured with is one table (`nirvana.measure.family.MEASURES`: the library
functions for decoder-only models and for T5 encoder-decoders), looked up once per loaded model; the
commands never branch on the architecture themselves.
"""

from __future__ import annotations

import sys

import torch

from nirvana.accuracy.harness import check_request, run_accuracy
from nirvana.cli.checks import check_model_args
from nirvana.cli.common import (
    add_model_args,
    hold_device,
    load_from_args,
    parse_int_list,
    print_json,
    record_command,
    stderr_progress,
)
from nirvana.data.text import check_text_name
from nirvana.errors import InvalidInput
from nirvana.measure.compare import generation_rows, ratios
from nirvana.measure.family import MEASURES, Measures, family
from nirvana.measure.generation import load_prompts
from nirvana.progress import sub_progress


def add_eval_args(p) -> None:
    g = p.add_argument_group("perplexity")
    g.add_argument(
        "--ppl",
        default=None,
        help="comma-separated datasets: wikitext2, ptb, wikitext2-valid, pydoc, python-code, FILE",
    )
    g.add_argument("--max-tokens", type=int, default=None, help="token budget per dataset (default: the whole text)")
    g.add_argument("--seq-len", type=int, default=512, help="window length (default 512, the paper's)")
    g.add_argument("--ppl-batch-size", type=int, default=4, help="windows per forward pass")
    g.add_argument("--fallback", action="store_true", help="use the embedded Python docs when a dataset is missing")
    g = p.add_argument_group("speed and memory")
    g.add_argument("--speed", action="store_true", help="measure prefill/decode tokens/s and peak memory")
    g.add_argument("--batch-sizes", default="1,8,32", help="comma-separated batch sizes (default 1,8,32)")
    g.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per sequence")
    g.add_argument("--new-tokens", type=int, default=32, help="generated tokens per sequence (decode)")
    g.add_argument("--repeats", type=int, default=3, help="timed runs per batch size (median reported)")
    g.add_argument("--warmup", type=int, default=1, help="untimed runs first")
    g.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    g = p.add_argument_group("accuracy (lm-evaluation-harness's own tasks)")
    g.add_argument(
        "--tasks",
        default=None,
        help="comma-separated: zeroshot7 (the paper's seven), arc_easy, arc_challenge, boolq, hellaswag, "
        "openbookqa, piqa, winogrande, lambada, mbpp, humaneval, gsm8k (8-shot CoT exact match); gold bits per "
        "byte (lower is better): mbpp_bpb, humaneval_bpb, gsm8k_bpb",
    )
    g.add_argument("--limit", default=None, help="the first N examples per task (default: all)")
    g.add_argument(
        "--task-batch-size",
        type=int,
        default=8,
        help="requests per forward, and rows generating at once unless --generation-batch-size (default 8)",
    )
    g.add_argument(
        "--generation-batch-size",
        type=int,
        default=None,
        help="rows generating at once in mbpp/humaneval/gsm8k, if not --task-batch-size (the completions are the "
        "same; on a CPU, 16 or 32 rows can cost less a row than 8: benchmarks/generation/step-cost-*.md)",
    )
    g.add_argument("--source", default="auto", help="auto (hub when reachable, else local files), local, hub")
    g.add_argument(
        "--allow-code-execution",
        action="store_true",
        help="let mbpp/humaneval run the model's generated code (in a bubblewrap sandbox)",
    )
    g.add_argument(
        "--unsafe-exec-without-sandbox",
        action="store_true",
        help="where bubblewrap cannot isolate, run generated code anyway as plain processes of your user "
        "(rlimits and seccomp only): only on a machine you would let the model's code damage",
    )
    g = p.add_argument_group("generations")
    g.add_argument("--generate", action="store_true", help="continue the prompt set")
    g.add_argument("--prompts", default=None, help="JSON prompt file (default nirvana/assets/prompts.json)")
    g.add_argument("--max-new-tokens", type=int, default=48)
    g.add_argument("--sample", action="store_true", help="sample (temperature 0.7, top-p 0.9) instead of greedy")
    g.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-cache", action="store_true", help="recompute perplexity/tasks even if cached")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def register(sub) -> None:
    p = sub.add_parser("eval", help="perplexity, speed/memory, zero-shot tasks and generations of one model")
    add_model_args(p)
    add_eval_args(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("compare", help="evaluate a dense and a pruned model side by side, with ratios")
    add_model_args(p, default=None, flag="--dense")
    p.add_argument("--pruned", required=True, help="pruned folder (from `prune --out`) or any model")
    for flag, default, text in (
        ("--dtype", "auto", "auto, float32, bfloat16, float16"),
        ("--device", "auto", "auto, cpu, cuda, cuda:N"),
    ):
        p.add_argument(flag, default=default, help=text)
    add_eval_args(p)
    p.set_defaults(func=cmd_compare)


def _check(args, *models: str) -> None:
    """Everything that needs no model, before the lock and the load: the models `models` (flags) name, the
    flags' ranges, the tasks, the perplexity datasets' names, the prompt file."""
    check_model_args(args, *models)
    if args.threads is not None:
        if args.threads < 1:
            raise InvalidInput(f"--threads must be a positive integer, got {args.threads}.")

        torch.set_num_threads(args.threads)
    try:
        args.batch_size_list = parse_int_list(args.batch_sizes)
    except ValueError as exc:
        raise InvalidInput(
            f"--batch-sizes must be comma-separated integers such as 1,8,32, got {args.batch_sizes!r}."
        ) from exc
    if args.tasks:  # before the model loads: a typo should not cost a 20 s load
        check_request(
            args.tasks,
            args.limit,
            args.task_batch_size,
            args.source,
            args.allow_code_execution,
            args.unsafe_exec_without_sandbox,
            args.generation_batch_size,
        )
    if not any((args.ppl, args.speed, args.tasks, args.generate)):
        args.ppl = "wikitext2"  # the field's main number, when nothing else was asked for
    for name in _datasets(args):
        check_text_name(name)
    if args.generate and args.prompts:
        load_prompts(args.prompts)  # a small JSON file: read again where the generations run


def _datasets(args) -> list[str]:
    return [d.strip() for d in (args.ppl or "").split(",") if d.strip()]


def perplexities(model, tokenizer, args) -> dict:
    out = {}
    for name in _datasets(args):
        r = MEASURES[family(model)].perplexity(
            model,
            tokenizer,
            name,
            seq_len=args.seq_len,
            max_tokens=args.max_tokens,
            batch_size=args.ppl_batch_size,
            fallback=args.fallback,
            use_cache=not args.no_cache,
            progress=stderr_progress,
        )
        out[name] = r.to_dict()
    return out


def speed_kwargs(args) -> dict:
    """The settings of `--speed` for the family's `speeds` function."""
    return {
        "batch_sizes": args.batch_size_list,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "progress": stderr_progress,
    }


def speeds_for(models: dict, args) -> dict:
    """{name: speed result} of models of one family, repeats interleaved."""
    return MEASURES[family(next(iter(models.values())))].speeds(models, **speed_kwargs(args))


def run_tasks_for(model, tokenizer, args) -> dict:
    return run_accuracy(
        model,
        tokenizer,
        args.tasks,
        limit=args.limit,
        batch_size=args.task_batch_size,
        generation_batch_size=args.generation_batch_size,
        source=args.source,
        allow_code_execution=args.allow_code_execution,
        allow_unsandboxed=args.unsafe_exec_without_sandbox,
        use_cache=not args.no_cache,
        progress=task_progress,
    )


def task_line(t: dict) -> str:
    """'acc 0.6100 ± 0.0345  acc_norm ...  n 200  (local validation, 12.3 s, 16.2 ex/s)' for one task."""
    parts = []
    for m in TASK_METRICS:
        if t.get(m) is not None:
            se = t.get(f"{m}_stderr")
            parts.append(f"{m} {t[m]:.4f}" + (f" ± {se:.4f}" if se is not None else ""))
            parts[-1] += " (lower is better)" if m == "bpb" else ""
    parts.append(f"n {t.get('n')}")
    where = f"{t.get('source')} {t.get('split')}, {t.get('seconds')} s, {t.get('examples_per_s')} ex/s"
    where += ", from the cache" if t.get("cache_hit") else ""
    return "  ".join(parts) + f"  ({where})"


# the per-task figures `eval` prints (`compare` subtracts them: nirvana.measure.compare.accuracy_deltas)
TASK_METRICS = ("acc", "acc_norm", "perplexity", "pass@1", "exact_match", "exact_match_flexible", "bpb")


def task_progress(fraction: float, message: str) -> None:
    """Task-level lines only: lm-eval draws its own tqdm bar per task."""
    if "~" not in message:
        stderr_progress(fraction, message)


def generation_kwargs(args) -> dict:
    """`--generate`'s settings; no `--prompts`: each family's default prompts."""
    return {
        "prompts": load_prompts(args.prompts) if args.prompts else None,
        "max_new_tokens": args.max_new_tokens,
        "do_sample": args.sample,
        "seed": args.seed,
        "progress": stderr_progress,
    }


def evaluate(lm, args) -> dict:
    """Everything `eval` was asked for, on one loaded model, with its family's functions (`MEASURES`)."""
    kind = family(lm.model)
    m = MEASURES[kind]
    result = {"model": lm.name, "source": lm.source, "family": kind, **m.facts(lm.model)}
    if args.ppl:
        result["ppl"] = perplexities(lm.model, lm.tokenizer, args)
    if args.speed:
        result["speed"] = speeds_for({"model": lm.model}, args)["model"]
    if args.tasks:
        result["tasks"] = run_tasks_for(lm.model, lm.tokenizer, args)
    if args.generate:
        result["generations"] = m.generate(lm.model, lm.tokenizer, **generation_kwargs(args))
    return result


def cmd_eval(args) -> int:
    _check(args)
    with hold_device(args, "eval"):
        lm = load_from_args(args)
        result = evaluate(lm, args)
    result["run"] = record_command("eval", args, result, _run_summary(result))
    if args.json:
        print_json(result)
    else:
        print_summary(result)
    return 0


def _run_summary(result: dict) -> dict:
    """The few numbers the runs list shows for an evaluation."""
    summary = {"model": result.get("model"), "params": result.get("params")}
    summary.update({f"ppl_{k}": v["ppl"] for k, v in result.get("ppl", {}).items()})
    return summary


def _same_family(dense, pruned, args) -> Measures:
    """The two models' shared `Measures`; InvalidInput for a mixed pair or an option the family cannot do."""
    kinds = family(dense.model), family(pruned.model)
    if kinds[0] != kinds[1]:
        raise InvalidInput(
            f"{args.dense!r} is {kinds[0]} but {args.pruned!r} is {kinds[1]}: compare a pruned model with its own "
            "dense model."
        )
    return MEASURES[kinds[0]]


def compare(dense, pruned, args) -> dict:
    """Both models' figures and the library's comparison of them (`measure.compare.ratios`; speed interleaved)."""
    m = _same_family(dense, pruned, args)
    out = {
        "dense": {"model": dense.name, "source": dense.source, "family": family(dense.model), **m.facts(dense.model)},
        "pruned": {
            "model": pruned.name,
            "source": pruned.source,
            "family": family(pruned.model),
            **m.facts(pruned.model),
        },
    }
    if args.ppl:
        out["dense"]["ppl"] = perplexities(dense.model, dense.tokenizer, args)
        out["pruned"]["ppl"] = perplexities(pruned.model, pruned.tokenizer, args)
    if args.speed:
        speeds = speeds_for({"dense": dense.model, "pruned": pruned.model}, args)
        out["dense"]["speed"], out["pruned"]["speed"] = speeds["dense"], speeds["pruned"]
    if args.tasks:
        out["dense"]["tasks"] = run_tasks_for(dense.model, dense.tokenizer, args)
        out["pruned"]["tasks"] = run_tasks_for(pruned.model, pruned.tokenizer, args)
    if args.generate:
        settings = generation_kwargs(args)
        progress = settings.pop("progress")
        out["generations"] = generation_rows(
            m.generate(dense.model, dense.tokenizer, progress=sub_progress(progress, 0.0, 0.5), **settings),
            m.generate(pruned.model, pruned.tokenizer, progress=sub_progress(progress, 0.5, 1.0), **settings),
        )
    out["ratios"] = ratios(out["dense"], out["pruned"], dense.model, pruned.model, m.speedup_rows)
    out["ratios"]["speed_first_phase"] = m.first_phase
    return out


def cmd_compare(args) -> int:
    _check(args, "dense", "pruned")
    with hold_device(args, "compare", f"{args.dense} vs {args.pruned}"):
        dense = load_from_args(args, args.dense)
        pruned = load_from_args(args, args.pruned)
        result = compare(dense, pruned, args)
    ppl_ratios = {f"ppl_ratio_{k}": v for k, v in result["ratios"].get("ppl", {}).items()}
    result["run"] = record_command("compare", args, result, {"dense": args.dense, "pruned": args.pruned, **ppl_ratios})
    if args.json:
        print_json(result)
    else:
        print_summary(result["dense"], "dense")
        print_summary(result["pruned"], "pruned")
        print_ratios(result["ratios"])
    return 0


def print_summary(r: dict, title: str | None = None) -> None:
    w = sys.stdout.write
    w(f"== {title or r['model']} ({r['model']}) ==\n")
    w(f"params {r['params']:,}   FLOPs/token {r['flops_per_token'] / 1e6:.1f} M (context {r['flops_context']})\n")
    m = MEASURES[r.get("family", "decoder-only")]
    for name, p in r.get("ppl", {}).items():
        w(
            f"ppl {name}:{p['split']} = {p['ppl']:.3f}  ({p['tokens']} tokens, {p['windows']} x {p['seq_len']})"
            f"{m.ppl_note}\n"
        )
    if "speed" in r:
        s = r["speed"]
        w(
            f"speed on {s['device_name']}, torch {s['torch_version']}, {s['threads']} threads "
            f"(median of {s['repeats']})\n"
        )
        for x in s["results"]:
            w(f"  batch {x['batch_size']:>3}: {m.speed_line(x)}\n")
    for name, t in r.get("tasks", {}).get("tasks", {}).items():
        w(f"task {name}: {task_line(t)}\n")
        if t.get("sandbox"):
            w(f"  {t['sandbox']['line']} (outcomes {t['sandbox']['outcomes']})\n")
    avg = r.get("tasks", {}).get("average")
    if avg:
        w(f"7-task average (paper's metric per task): {avg['value']:.4f} ± {avg['stderr'] or float('nan'):.4f}\n")
    for g in r.get("generations", []):
        w(f"[{g['id']}] {g['prompt']}\n  -> {g['output']}\n")


def print_ratios(r: dict) -> None:
    w = sys.stdout.write
    w(
        f"== ratios ==\nparams {r['params']:.3f}  FLOPs {r['flops_per_token']:.3f}  "
        f"ideal speed-up {r['ideal_speedup']:.2f}x\n"
    )
    for name, v in r.get("ppl", {}).items():
        w(f"ppl {name}: pruned/dense {v:.3f}\n")
    for name, diffs in r.get("tasks", {}).items():
        if not isinstance(diffs, dict) or name == "zeroshot7_average":
            continue
        parts = [f"{m} {v:+.4f}" for m, v in diffs.items() if isinstance(v, float)]
        if "bpb_paired" in diffs:
            pd = diffs["bpb_paired"]
            parts.append(f"paired over {pd['n']} problems {pd['mean']:+.4f} ± {pd['stderr']:.4f} (lower bpb is better)")
        if "pass_paired" in diffs:
            pd = diffs["pass_paired"]
            parts.append(f"pass@1 paired over {pd['n']} problems {pd['mean']:+.4f} ± {pd['stderr']:.4f}")
        w(f"task {name}: pruned - dense {'  '.join(parts)}\n")
    first = r.get("speed_first_phase", "prefill")  # a T5's is its encoder pass
    for x in r.get("speed", []):
        w(
            f"batch {x['batch_size']:>3}: {first} {x[f'{first}_speedup']:.2f}x (ideal {x[f'{first}_ideal']:.2f}x, "
            f"{x[f'{first}_fraction_of_ideal']:.0%})  decode {x['decode_speedup']:.2f}x "
            f"(ideal {x['decode_ideal']:.2f}x, "
            f"{x['decode_fraction_of_ideal']:.0%})  memory {x['peak_memory_ratio']:.2f}\n"
        )
