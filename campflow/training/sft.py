"""Supervised fine-tuning on filtered trajectories with TRL's SFTTrainer (assistant-only loss).

A dataset of a user's agent's episodes (:mod:`campflow.training.agent_data`) is pre-tokenized: its
``input_ids`` are the ids the proxy recorded, and the loss is on those its ``completion_mask`` marks
(TRL's ``completion_only_loss``), nothing rendered or tokenized again.

Device and precision come from :func:`campflow.hardware.resolve_hardware` (the embedded default: the
CPU in float32), adapters from :mod:`campflow.training.lora`, trackers from
:mod:`campflow.training.tracking`; an explicit tokenizer and config, and progress reported through
campflow's reporter instead of tqdm. A vision-language model trains through its processor on rows
with images (TRL's vision collator renders them with the model's template); its checkpoint keeps the
processor. The checkpoint is staged and renamed into place when training
completes, then registered with its parent, dataset and metrics (by the main process only).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campflow import progress
from campflow.agents.local import MODEL_LOADING
from campflow.agents.vision import is_vision_model, load_processor, save_processor
from campflow.config import SFTSettings
from campflow.errors import CampflowError
from campflow.hardware import Hardware, resolve_hardware
from campflow.storage.store import Store
from campflow.threads import ThreadTuner
from campflow.training import checkpoints
from campflow.training.distributed import is_main_process, processes
from campflow.training.labelled_loss import LabelledLoss
from campflow.training.lora import adapter_metrics, starting_model
from campflow.training.resuming import (
    clear_trainer,
    finished_run,
    last_checkpoint,
    mark_trained,
    resumed_step,
    saving_args,
)
from campflow.training.templates import check_sft_template
from campflow.training.tracking import tracking_args, trainer_dir


@dataclass
class TrainResult:
    """A trained checkpoint and what training measured."""

    checkpoint: checkpoints.Checkpoint
    metrics: dict[str, Any]
    reused: bool = False


def finished_result(
    store: Store,
    workspace: Path,
    final: Path,
    kind: str,
    parent_id: str,
    dataset_id: str | None,
    report_to: Sequence[str],
    *,
    main: bool,
) -> TrainResult | None:
    """The run of checkpoint ``final`` if it finished but was stopped before the store recorded it (its model
    in place, :func:`~campflow.training.resuming.finished_run`): recorded now instead of trained again."""
    metrics = finished_run(final)
    if metrics is None:
        return None
    model_id = final.name
    if not main:
        return TrainResult(checkpoints.Checkpoint(model_id, kind, final, parent_id, dataset_id, metrics), metrics)
    ckpt = checkpoints.register(store, model_id, kind, final, parent=parent_id, dataset_id=dataset_id, metrics=metrics)
    clear_trainer(final, trainer_dir(workspace, final, model_id, report_to))
    return TrainResult(ckpt, metrics, reused=True)


def quiet(trainer: Any) -> Any:
    """Drop the callback that prints every log dict to stdout (progress goes to campflow's reporter)."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


def progress_callback(key: str, description: str) -> Any:
    """A transformers TrainerCallback that reports steps and the latest loss to campflow's reporter."""
    from transformers import TrainerCallback

    reporter = progress.current()

    class Report(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            reporter.start(key, description, state.max_steps)

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            reporter.advance(key)

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            if logs:
                shown = {k: logs[k] for k in ("loss", "reward") if k in logs}
                if shown:
                    reporter.update(key, f"{description} ({', '.join(f'{k} {v:.3g}' for k, v in shown.items())})")

        def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001
            reporter.finish(key)

    return Report()


def threads_callback(tuner: ThreadTuner | None, work: Callable[[], float] | None = None) -> list[Any]:
    """A TrainerCallback that runs each step under ``tuner``'s thread count and reports its time per unit
    of ``work`` (a running count, e.g. token positions; default: steps). ``[]`` without a tuner."""
    if tuner is None:
        return []
    from transformers import TrainerCallback

    class Threads(TrainerCallback):
        started, done = 0.0, 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            tuner.apply()  # on the training thread, where the step computes
            self.started, self.done = time.perf_counter(), work() if work else 0.0

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            tuner.record(time.perf_counter() - self.started, (work() - self.done) if work else 1.0)

    return [Threads()]


def checkpointing_arg(config_class: type, enabled: bool) -> dict[str, bool]:
    """The training-args field that turns activation (gradient) checkpointing on or off.

    TRL's configs default it to on; newer transformers call it ``activation_checkpointing`` and keep
    ``gradient_checkpointing`` as a deprecated alias that warns on every run.
    """
    names = {f.name for f in dataclasses.fields(config_class)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": enabled}


def sft_trainer(fused_loss: bool, labelled: bool = True, **kwargs: Any) -> Any:
    """TRL's SFTTrainer that counts the tokens it trains on (``tokens_seen``, and ``positions`` computed,
    padding included), with TRL's loss (``fused_loss``) or the model's own cross-entropy, computed where
    it applies as :mod:`campflow.training.labelled_loss` does (the same loss on fewer positions;
    ``labelled=False``: on every position, as the model computes it).

    TRL computes the SFT loss through a chunked, fused lm-head kernel that saves GPU memory on large
    vocabularies; on a CPU it is ~40% of a step of the tiny model (benchmarks/bench_sft_throughput.py).
    TRL's collator already sets labels to -100 outside assistant turns, so transformers' own
    ``Trainer.compute_loss`` (the model's shifted cross-entropy over the labelled tokens, normalized
    by ``num_items_in_batch``) is the same objective. TRL's entropy and token-accuracy logs are lost.
    """
    from transformers import Trainer
    from trl import SFTTrainer

    class CountingSFTTrainer(SFTTrainer):
        tokens_seen = 0  # tokens trained on
        positions = 0  # token positions computed, padding included
        labelled = LabelledLoss()

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001
            counted = model.training and "attention_mask" in inputs
            if counted:
                self.tokens_seen += int(inputs["attention_mask"].sum())
            if fused_loss:
                if counted:
                    self.positions += int(inputs["attention_mask"].numel())
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if labelled and not return_outputs and self.args.n_gpu <= 1:

                def own(batch: dict[str, Any]) -> Any:
                    return Trainer.compute_loss(self, model, {**batch, "use_cache": False}, False, num_items_in_batch)

                computed = self.labelled(model, inputs, num_items_in_batch, self.accelerator.num_processes, own)
                if computed is not None:
                    loss, positions = computed
                    self.positions += positions
                    return loss
            if counted:
                self.positions += int(inputs["attention_mask"].numel())
            inputs["use_cache"] = False
            return Trainer.compute_loss(
                self, model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )

    return CountingSFTTrainer(**kwargs)


def sft_arguments(
    cfg: SFTSettings,
    hardware: Hardware,
    output_dir: Path,
    max_length: int,
    *,
    report_to: Sequence[str] = (),
    run_name: str | None = None,
    save_steps: int | None = None,
    tokenized: bool = False,
) -> Any:
    """TRL's ``SFTConfig`` as campflow trains with it: ``cfg``'s schedule, ``hardware``'s device and
    precision, assistant-only loss (``tokenized``: the loss on the ids a pre-tokenized dataset's
    ``completion_mask`` marks), a resumable checkpoint every ``save_steps`` (None: a tenth of the
    steps; :mod:`campflow.training.resuming`), trackers ``report_to``."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(output_dir),
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=int(cfg.warmup_ratio * cfg.max_steps),
        weight_decay=0.0,
        logging_steps=max(1, cfg.max_steps // 40),
        **saving_args(save_steps, cfg.max_steps),
        assistant_only_loss=not tokenized,
        completion_only_loss=tokenized,
        max_length=max_length,
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
        seed=cfg.seed,
        data_seed=cfg.seed,
        disable_tqdm=True,
        dataloader_num_workers=0,
        **hardware.trainer_args,
        **tracking_args(report_to, run_name or "campflow-sft"),
        **checkpointing_arg(SFTConfig, cfg.gradient_checkpointing),
    )


def train_sft(
    store: Store,
    workspace: Path,
    base: str,
    dataset_id: str,
    cfg: SFTSettings,
    max_length: int | None = None,
    *,
    hardware: Hardware | None = None,
    report_to: Sequence[str] = (),
    save_steps: int | None = None,
) -> TrainResult:
    """Fine-tune checkpoint ``base`` (an id, a registered path, or a model folder) on SFT dataset
    ``dataset_id``; returns the registered checkpoint.

    ``hardware`` (default: resolved from ``auto``) sets device and precision; ``report_to`` names
    experiment trackers (the run is named after the checkpoint id). Every ``save_steps`` (None: a tenth
    of the steps) a resumable checkpoint is saved; a run of the same training that was killed continues
    from its last one (metric ``resumed_from_step``). Under ``accelerate launch`` every process trains and
    only the main one writes the checkpoint and the store.
    """
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    hardware = hardware or resolve_hardware()
    main = is_main_process()
    parent = checkpoints.resolve(store, base, record=main)
    rows = store.query("SELECT path, kind FROM datasets WHERE dataset_id = ?", [dataset_id])
    if not rows or rows[0]["kind"] != "sft":
        raise CampflowError(f"no SFT dataset {dataset_id!r}; build one with `campflow dataset build`")
    model_id = checkpoints.checkpoint_id(
        "sft", parent.model_id, dataset_id, cfg.model_dump(), max_length, hardware.precision, *processes()
    )
    existing = checkpoints.find(store, model_id)
    if existing is not None:
        return TrainResult(existing, existing.metrics, reused=True)
    final = checkpoints.models_dir(workspace) / model_id
    done = finished_result(store, workspace, final, "sft", parent.model_id, dataset_id, report_to, main=main)
    if done is not None:
        return done

    import datasets
    from transformers import AutoTokenizer

    hardware.select()
    vision = is_vision_model(parent.path)
    with MODEL_LOADING:  # a vision-language model trains through its processor (images and text)
        processing = load_processor(parent.path) if vision else AutoTokenizer.from_pretrained(parent.path)
    train = datasets.load_from_disk(store.stored_path(rows[0]["path"]))
    # the ids a user's agent's episodes recorded (campflow.training.agent_data): trained as they are
    tokenized = "input_ids" in train.column_names
    if tokenized:
        train = train.select_columns(["input_ids", "completion_mask"])
    else:
        check_sft_template(processing, parent.path)
    if "images" in train.column_names and not vision:
        raise CampflowError(
            f"dataset {dataset_id} holds images but {parent.model_id} reads text only; train a vision-language "
            "model on it (improve.model: embedded-vl), or collect text-mode episodes (rollout.observation: text)"
        )
    if vision:
        train = train.map(_empty_turns_as_parts, features=train.features, keep_in_memory=True)
    start = starting_model(parent, cfg.lora, hardware)
    max_length = max_length or start.model.config.get_text_config().max_position_embeddings
    with checkpoints.staging(final, write=main, resume=True) as out:
        args = sft_arguments(
            cfg,
            hardware,
            trainer_dir(workspace, out, model_id, report_to),
            max_length,
            report_to=report_to,
            run_name=model_id,
            save_steps=save_steps,
            tokenized=tokenized,
        )
        tuner = hardware.thread_tuner()
        extra = {}
        if "images" in train.column_names:  # each row rendered with its own tools (TRL's collator drops them)
            from trl.chat_template_utils import get_training_chat_template

            from campflow.training.vision_sft import VisionToolsCollator

            template = get_training_chat_template(processing) or processing.chat_template
            extra["data_collator"] = VisionToolsCollator(processing, template, max_length)
            args.remove_unused_columns = False  # the collator reads the tools column
        trainer = quiet(
            sft_trainer(
                cfg.fused_loss,
                model=start.model,
                args=args,
                train_dataset=train,
                processing_class=processing,
                peft_config=start.peft_config,
                callbacks=[progress_callback("sft", "SFT")],
                **extra,
            )
        )
        for callback in threads_callback(tuner, lambda: float(trainer.positions)):
            trainer.add_callback(callback)
        resume = last_checkpoint(Path(args.output_dir))
        started = time.perf_counter()
        result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        elapsed = time.perf_counter() - started
        trainer.save_model(str(out))  # every process: gathers sharded weights; only the main one writes
        losses = [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]
        tokens = trainer.tokens_seen
        metrics = {
            "train_loss": result.training_loss,
            "final_loss": losses[-1][1] if losses else None,
            "steps": trainer.state.global_step,
            "resumed_from_step": resumed_step(resume),
            "seconds": round(elapsed, 1),
            "examples": len(train),
            "tokens_per_second": round(tokens / elapsed, 1) if tokens else None,
            "loss_curve": losses,
            "device": hardware.kind,
            "precision": hardware.precision,
            "positions_per_token": round(trainer.positions / tokens, 3) if tokens else None,
            "labelled_loss": trainer.labelled.used,
            **(tuner.summary() if tuner is not None else {}),
            **adapter_metrics(start, trainer.model, cfg.lora),
        }
        if not main:
            return TrainResult(
                checkpoints.Checkpoint(model_id, "sft", final, parent.model_id, dataset_id, metrics), metrics
            )
        if vision:
            save_processor(processing, out)
        else:
            processing.save_pretrained(str(out))
        mark_trained(out, metrics)  # last: the trainer's resumable checkpoints stay until the row below
    ckpt = checkpoints.register(
        store, model_id, "sft", final, parent=parent.model_id, dataset_id=dataset_id, metrics=metrics
    )
    clear_trainer(final, trainer_dir(workspace, final, model_id, report_to))
    return TrainResult(ckpt, metrics)


def _empty_turns_as_parts(row: dict[str, Any]) -> dict[str, Any]:
    """A row for a vision-language model: an assistant turn without text gets the empty parts list.

    TRL turns every string content into a text part for a VLM, and Qwen-VL templates write a newline
    before the tool call of a turn whose content is a non-empty list; an empty string would so train a
    newline (merged with the header's) that the model never sees at inference, where the processor
    renders the conversation as it is."""
    messages = [
        {**m, "content": []} if m.get("role") == "assistant" and m.get("content") == "" else m for m in row["messages"]
    ]
    return {"messages": messages}
