"""The Recover tab of Prune & compare: LoRA recovery of the session's pruned copy, live.

Training runs in a background thread (`RecoveryJob`) so the page stays responsive: a fragment
redraws the loss curve every second from the job's steps, Stop sets the job's event (the library
stops between micro-batches and keeps the last whole step), and the merged model is put in the
session only when the job ends. The job trains a *copy* of the session's pruned model: the
pruned copy stays as it was, for the before/after comparison, and the shared dense model is never
touched. Heavy work holds the device lock (`nirvana.guard.locks.heavy_work`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from nirvana import charts
from nirvana.bench.recovery import DEFAULT_OUT, acc7_text, rankings
from nirvana.bench.rows import read_rows
from nirvana.guard.locks import heavy_work
from nirvana.measure.compare import perplexity_pair
from nirvana.models.weights import input_device
from nirvana.recovery.config import DEFAULT_STEPS, RecoveryConfig
from nirvana.recovery.run import brief_summary, run_recovery
from nirvana.recovery.save import save_recovered
from nirvana.recovery.teacher_cache import TeacherCache, default_directory
from nirvana.recovery.train import RecoveryResult, RecoveryStep, target_module_names
from nirvana.store.keys import content_key
from nirvana.store.paths import cache_dir
from ui import evals, runs, state
from ui.errors import guard

# Training speed measured on this project's 2-core CPU (fp32, 1 thread, batch 16 x 128, SmolLM2-135M
# at 50%: ~100 tokens/s for 82 M parameters): about 4 * params * tokens/s = 33e9 FLOP/s of LoRA
# training (forward + activation-gradient backward). Replaced by the session's own measured rate.
CPU_TRAIN_FLOPS = 3.3e10
DATA_CHOICES = {
    "auto": "auto: Alpaca (hub) when reachable, else the calibration pool",
    "calibration": "calibration pool (WikiText-2 validation, disjoint from the test split)",
    "alpaca": "Alpaca-cleaned instructions (hub)",
    "pydoc": "Python docs shipped with CPython",
}
LOSS_CHOICES = {
    "lm": "next-token loss (the reference recipe)",
    "kd": "distillation: KL to the dense model",
    "mix": "both, weighted",
}
TRAIN_CHOICES = {"lora": "LoRA adapters (merged back)", "full": "full fine-tuning of the decoder layers"}


@dataclass
class RecoveryJob:
    """One recovery run in a background thread; the page reads its fields, the thread writes them."""

    plan_key: str
    config: RecoveryConfig
    data_source: str
    steps: list[RecoveryStep] = field(default_factory=list)
    status: str = "starting"  # starting, waiting, training, done, failed
    message: str = ""
    result: RecoveryResult | None = None
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.perf_counter)
    thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


def start(
    pruned_model,
    tokenizer,
    plan_key: str,
    config: RecoveryConfig,
    data_source: str,
    teacher=None,
    teacher_name=None,
    teacher_cache: TeacherCache | None = None,
) -> RecoveryJob:
    """Tokenize the data and train a copy of `pruned_model` in a thread; return the job at once. `teacher`:
    the session's dense model (never trained, only read under no_grad), for a distillation loss;
    `teacher_cache`: its logits on disk, for a later run on the same windows."""

    if config.train == "lora":
        target_module_names(pruned_model, config)  # a bad r fails here, in the page, not in the thread
    job = RecoveryJob(plan_key, config, data_source)

    def log(message: str) -> None:
        job.message = message

    def run() -> None:
        try:
            with heavy_work(str(input_device(pruned_model)), _waiting(job), who="an explorer session (recovery)"):
                job.status = "training"
                job.result = run_recovery(
                    pruned_model,
                    tokenizer,
                    config,
                    data_source,
                    progress=job.steps.append,
                    log=log,
                    should_stop=job.stop,
                    teacher=teacher,
                    teacher_name=teacher_name,
                    teacher_cache=teacher_cache,
                )
            job.status, job.message = "done", job.result.message
        except BaseException as exc:  # shown in the page; the thread must not die silently
            job.status, job.error = "failed", exc

    job.thread = threading.Thread(target=run, name="nirvana-recovery", daemon=True)
    job.thread.start()
    return job


def _waiting(job: RecoveryJob):
    def on_wait(message: str) -> None:
        job.status, job.message = "waiting", message

    return on_wait


def teacher_cache_bytes(config: RecoveryConfig, vocab: int) -> int:
    """At most what the teacher's logits of this budget take in fp32: every training and held-out token."""
    return (config.total_tokens + config.eval_sequences * config.seq_len) * vocab * 4


def estimate_training_seconds(params: int, config: RecoveryConfig, rate: float | None) -> float:
    """Training time of the budget: tokens * 4 * params / FLOP rate (the session's measured one if any)."""
    return config.total_tokens * 4 * params / (rate or CPU_TRAIN_FLOPS)


def loss_chart(steps: list[RecoveryStep], title: str = "Recovery loss") -> go.Figure:
    train = [(s.step, s.loss) for s in steps if s.loss is not None]
    held = [(s.step, s.heldout_loss) for s in steps if s.heldout_loss is not None]
    fig = go.Figure()
    if train:
        fig.add_scatter(x=[s for s, _ in train], y=[v for _, v in train], mode="lines", name="training loss")
    if held:
        x, y = [s for s, _ in held], [v for _, v in held]
        fig.add_scatter(x=x, y=y, mode="lines+markers", name="held-out loss")
    for part, name in (("lm", "next-token part"), ("kd", "distillation part (KL to the teacher)")):
        values = [(s.step, s.parts[part]) for s in steps if s.parts and part in s.parts and len(s.parts) > 1]
        if values:
            fig.add_scatter(x=[s for s, _ in values], y=[v for _, v in values], mode="lines", name=name)
    kl = [(s.step, s.heldout_kl) for s in steps if s.heldout_kl is not None]
    if kl:
        fig.add_scatter(
            x=[s for s, _ in kl], y=[v for _, v in kl], mode="lines+markers", name="held-out KL to the teacher"
        )
    fig.update_layout(
        title={"text": title, "x": 0.01}, xaxis_title="optimizer step", yaxis_title="loss (nats)", height=340,
        legend=charts.LEGEND,
    )  # fmt: skip
    return fig


def settings_form(on_cpu: bool) -> tuple[RecoveryConfig, str]:
    """The reference recipe as defaults; every value settable. Raises InvalidInput on a bad value."""
    d = RecoveryConfig()
    c = st.columns(4)
    steps = c[0].number_input("Steps", 1, 100_000, DEFAULT_STEPS if on_cpu else 200, key="rec_steps")
    batch = c[1].number_input("Batch (sequences)", 1, 1024, d.batch_size, key="rec_batch")
    seq_len = c[2].selectbox("Tokens per sequence", [16, 64, 128, 256, 512], index=2, key="rec_seq_len")
    lr = c[3].number_input("Learning rate", 0.0, 1.0, d.lr, format="%.6f", step=1e-5, key="rec_lr")
    c = st.columns(4)
    r = c[0].number_input("LoRA rank r", 1, 256, d.r, key="rec_r")
    alpha = c[1].number_input("LoRA alpha", 1.0, 1024.0, d.alpha, key="rec_alpha")
    dropout = c[2].number_input("LoRA dropout", 0.0, 0.9, d.dropout, step=0.01, key="rec_dropout")
    data = c[3].selectbox("Training data", list(DATA_CHOICES), format_func=DATA_CHOICES.get, key="rec_data")
    c = st.columns(4)
    loss = c[0].selectbox("Objective", list(LOSS_CHOICES), format_func=LOSS_CHOICES.get, key="rec_loss")
    temperature = c[1].number_input("Temperature", 0.1, 20.0, d.temperature, step=0.5, key="rec_temperature")
    weight = c[2].number_input("Distillation weight (mix)", 0.0, 1.0, d.kd_weight, step=0.05, key="rec_kd_weight")
    train = c[3].selectbox("What is trained", list(TRAIN_CHOICES), format_func=TRAIN_CHOICES.get, key="rec_train")
    micro = min(int(batch), d.micro_batch_size)
    while int(batch) % micro:
        micro -= 1
    config = RecoveryConfig(
        r=int(r),
        alpha=float(alpha),
        dropout=float(dropout),
        lr=float(lr),
        batch_size=int(batch),
        micro_batch_size=micro,
        seq_len=int(seq_len),
        steps=int(steps),
        eval_every=max(1, int(steps) // 8),
        loss=loss,
        temperature=float(temperature),
        kd_weight=float(weight),
        train=train,
    )
    return config, data


def render(lm, pruned: state.PrunedCopy) -> None:
    """The tab: settings, estimate, start/stop, live curve, perplexity before/after, save."""
    job: RecoveryJob | None = state.session.recovery_job
    if job is not None and job.plan_key != pruned.plan_key:
        job.stop.set()
        state.session.forget("recovery_job", "recovered")
        job = None
    with guard("the recovery settings") as g:
        config, data = settings_form(state.on_cpu())
    if g.failed:
        return
    seconds = estimate_training_seconds(pruned.params, config, state.session.recovery_rate)
    st.caption(
        f"Budget: {config.total_steps} steps x {config.batch_size} x {config.seq_len} = "
        f"**{config.total_tokens:,} tokens**; estimated {seconds / 60:.1f} min of training here "
        f"({'measured in this session' if state.session.recovery_rate else 'from the speed measured on a 2-core CPU'})"
        ", plus held-out evaluations. LoRA adapters and optimizer state are fp32."
    )
    keep_logits = False
    if config.loss != "lm":
        st.info(
            f"Teacher: the dense **{lm.name}** loaded on the Model page (the model this one was pruned from), read "
            "under no_grad for every micro-batch: training costs one more forward pass per step, and its held-out "
            "KL to the student is drawn beside the losses.",
            icon=":material/school:",
        )
        size = teacher_cache_bytes(config, lm.model.get_output_embeddings().out_features)
        keep_logits = st.checkbox(
            f"Keep the teacher's logits on disk (up to {size / 2**30:.2f} GiB in fp32)",
            key="rec_teacher_cache",
            help=f"In {default_directory()}, one file per micro-batch, keyed by the teacher and the token ids: "
            "another recovery on the same data (another pruned copy, objective or learning rate) reads them instead "
            "of running the teacher. The exact size and the free space are checked before training starts.",
        )
    row = st.columns([1, 1, 3])
    if job is None or not job.running:
        if row[0].button("Start recovery", type="primary", key="rec_start"):
            with guard("starting the recovery") as g:
                teacher = lm.model if config.loss != "lm" else None
                cache = TeacherCache(default_directory(), teacher) if keep_logits and teacher is not None else None
                job = start(pruned.model, lm.tokenizer, pruned.plan_key, config, data, teacher, lm.name, cache)
            if not g.failed:
                state.session.recovery_job = job
                state.session.forget("recovered")
    elif row[0].button("Stop", key="rec_stop", help="stops after the current micro-batch; keeps the last step"):
        job.stop.set()
    if job is not None:
        _collect(lm, pruned, job)  # before the fragment, which reruns the page until this has happened
        _live(job)
        _finish(lm, pruned, job)


@st.fragment(run_every=1.0)
def _live(job: RecoveryJob) -> None:
    last = job.steps[-1] if job.steps else None
    if job.status == "failed":
        st.error(f"Recovery failed: {type(job.error).__name__}: {job.error}")
        return
    if last is not None:
        st.progress(min(1.0, last.fraction), text=last.message)
    else:
        st.info(job.message or "starting…")
    st.plotly_chart(loss_chart(job.steps), key="rec_chart")
    if job.status == "done" and state.session.recovered is None:
        st.rerun()  # the whole page: the before/after and save parts appear


def _collect(lm, pruned: state.PrunedCopy, job: RecoveryJob) -> None:
    """Once the job is done: its merged model into the session, its measured speed for the next
    estimate, and the run recorded (Runs page)."""
    result = job.result
    if job.status != "done" or result is None or state.session.recovered is not None:
        return
    if result.tokens_trained:
        state.session.recovery_rate = 4 * pruned.params * result.tokens_per_second
    key = content_key("recovered", pruned.model_key, job.config.to_dict(), job.data_source, result.steps_done)
    settings = {"recovery": job.config.to_dict(), "data": job.data_source}
    plan = pruned.plan or state.session.plan  # the pruned copy's plan (another method's too)
    run_id = runs.record_session_run(
        "recover", lm, plan, brief_summary(result), metrics=result.summary(), settings=settings
    )
    state.session.recovered = {"model": result.model, "key": key, "run_id": run_id}
    state.session.forget("rec_ppl_result")


def _finish(lm, pruned: state.PrunedCopy, job: RecoveryJob) -> None:
    result = job.result
    if job.status != "done" or result is None:
        return
    run_id = (state.session.recovered or {}).get("run_id")
    (st.warning if result.status != "complete" else st.success)(
        f"{result.message}: {result.tokens_trained:,} tokens in {result.train_seconds:.0f} s "
        f"({result.tokens_per_second:.0f} tokens/s), data {result.data.get('origin')}."
        + (f" Recorded as run `{run_id}` (Runs page)." if run_id else "")
    )
    cache = result.teacher_cache
    if cache:
        st.caption(
            f"Teacher logits: {cache['hits']} micro-batches read from the cache, {cache['misses']} computed and "
            f"written ({cache['bytes_written'] / 2**30:.2f} GiB; {cache['bytes_total'] / 2**30:.2f} GiB for this "
            f"budget) in `{cache['directory']}`."
        )
    _perplexity(lm, pruned, state.session.recovered)
    _save(lm, pruned, result)


def _perplexity(lm, pruned: state.PrunedCopy, recovered: dict) -> None:
    c = st.columns([2, 2, 3])
    tokens = c[0].number_input("Perplexity tokens", 128, 1_000_000, 2048, step=512, key="rec_ppl_tokens")
    if c[1].button("Perplexity before / after", key="rec_ppl"):
        with guard("measuring perplexity"):
            before = evals.perplexity(pruned.model, lm.tokenizer, pruned.model_key, "wikitext2", int(tokens), 512)
            after = evals.perplexity(recovered["model"], lm.tokenizer, recovered["key"], "wikitext2", int(tokens), 512)
            state.session.rec_ppl_result = (before, after)
    result = state.session.rec_ppl_result
    if result:
        pair = perplexity_pair(*result)
        m = st.columns(3)
        m[0].metric("Pruned perplexity", f"{pair['before']:.2f}")
        delta = f"{pair['delta']:+.2f}"
        m[1].metric("Recovered perplexity", f"{pair['after']:.2f}", delta=delta, delta_color="inverse")
        m[2].metric("Tokens evaluated", f"{pair['predicted_tokens']:,}")
        st.caption(f"{pair['dataset']} {pair['split']} ({pair['origin']}), {pair['seq_len']}-token windows.")


def _save(lm, pruned: state.PrunedCopy, result: RecoveryResult) -> None:

    default = cache_dir() / "recovered" / f"{pruned.plan_key}-s{result.steps_done}"
    folder = st.text_input("Save the recovered model to", value=str(default), key="rec_save_dir")
    if st.button("Save recovered model", key="rec_save"):
        with guard("saving the recovered model") as g, st.spinner("Writing safetensors…"):
            plan = pruned.plan or state.session.plan
            path = save_recovered(result, lm.tokenizer, plan, folder, base_model=lm.name, allow_partial=True)
        if not g.failed:
            st.success(f"Saved to `{path}` (model/, plan.json, recovery.json). Load it on the Model page.")


def evidence() -> None:
    """The committed recovery benchmark (`benchmarks/recovery/`) on the Evidence page: measured, never live."""
    st.markdown("##### Does the pruned model fine-tune back? (LoRA recovery, measured)")
    rows = read_rows(DEFAULT_OUT / "recovery.csv")
    if not rows:
        st.caption("No recovery benchmark yet: `python -m nirvana bench recovery --model smollm2-135m`.")
        return
    r0 = rows[0]
    st.caption(
        f"{r0['model']}: each pruned model LoRA-recovered for {r0['steps']} steps ({r0['lora']}) on `{r0['data']}`, "
        f"seed {r0['seed']}; perplexity on the first {r0['token_budget']} tokens. {r0['machine']}."
    )
    table = pd.DataFrame(
        {
            "criterion": r["criterion"],
            "allocation": r["allocation"],
            "sparsity": float(r["sparsity"]),
            "WikiText-2 before": float(r["ppl_wikitext2_before"]),
            "WikiText-2 after": float(r["ppl_wikitext2_after"]),
            "PTB before": float(r["ppl_ptb_before"]),
            "PTB after": float(r["ppl_ptb_after"]),
            "tokens trained": int(r["tokens_trained"]),
            "acc7 before (%)": acc7_text(r, "acc7_before"),
            "acc7 after (%)": acc7_text(r, "acc7_after"),
        }
        for r in rows
    )
    st.dataframe(table, hide_index=True)
    for line in rankings(rows):
        st.markdown(line)
    png = DEFAULT_OUT / "recovery.png"
    if png.exists():
        st.image(str(png), caption="training and held-out loss of every row")
