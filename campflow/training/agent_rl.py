"""GRPO on a user's agent's own episodes: the agent plays, the model being trained answers behind the proxy.

Each GRPO step, TRL's rollout hook (``rollout_func``) hands over the step's prompts (each instance
``num_generations`` times); every one becomes an episode the user's agent program plays
(:class:`~campflow.proxy.runner.AgentRunner`), with the policy being trained answering its calls behind
the recording proxy (:class:`LiveBackend`: the trainer's model, in this process, at the RL temperature).
The episodes are stored as run ``<checkpoint>-step<N>`` like any other, their calls in ``proxy_calls``.

A GRPO completion is the episode's token sequence as the proxy recorded it
(:func:`~campflow.proxy.records.merge_calls`): the prompt is everything before the model's first sampled
id, the completion everything after, with the ids the model did not sample (tool results, the agent's
messages, the template's headers) masked out of the loss (TRL's ``env_mask``), and the sampled ids'
logprobs beside them. An episode whose calls do not merge into one sequence (the agent rewrote its
history) trains on its last sequence, the one that reached the end; the share merged is a metric. The
reward is the bootcamp's verifier on the episode's final state (the episode's reward, as evaluation
records it); the group's advantages come from it as TRL computes them. An episode with no recorded ids
(the agent failed before its first call) or ending ``infra_error`` keeps its reward in the group but has
nothing in the loss.

Resumable as :func:`campflow.training.rl.train_rl` is: TRL's checkpoints every ``save_steps``; a killed
run continues from its last one and plays the steps it has left (a step played again replaces its
episodes; only the calls of the new play are read).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from campflow.bootcamps import registry
from campflow.bootcamps.base import Instance
from campflow.bootcamps.splits import assert_not_held_out
from campflow.config import RLSettings
from campflow.hardware import Hardware, resolve_hardware
from campflow.proxy.local import LocalBackend
from campflow.proxy.program import AgentProgram
from campflow.proxy.records import merge_calls, read_calls
from campflow.proxy.runner import AgentItem, AgentRunner
from campflow.rollout.engine import RolloutSettings
from campflow.rollout.episode import Episode, Termination
from campflow.serialization import to_json
from campflow.storage.store import Store, now
from campflow.training import checkpoints
from campflow.training.distributed import is_main_process, processes
from campflow.training.lora import adapter_metrics, starting_model
from campflow.training.resuming import clear_trainer, last_checkpoint, mark_trained, resumed_step
from campflow.training.rl import EpisodeLimits, grpo_arguments
from campflow.training.sft import TrainResult, finished_result, progress_callback, quiet, threads_callback
from campflow.training.tracking import trainer_dir


class LiveBackend(LocalBackend):
    """The model being trained, answering the proxy's calls from this process (no copy, no reload).

    Args:
        model: the trainer's model (unwrapped); it generates in eval mode, under ``torch.inference_mode``.
        tokenizer: its tokenizer (chat template included).
        model_id: what the store records as the answering model.
        max_new_tokens / temperature / seed / batch_size: as for :class:`LocalBackend`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_id: str,
        max_new_tokens: int,
        temperature: float,
        seed: int = 0,
        batch_size: int = 16,
    ) -> None:
        super().__init__(
            model_id,
            model_id=model_id,
            model_names=[model_id],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            batch_size=batch_size,
            device="cpu",  # unused: the model stays where the trainer put it
            precision="fp32",
        )
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._live = (model, tokenizer, threading.Lock())

    def loaded(self) -> tuple[Any, Any, Any]:
        return self._live


class AgentRollouts:
    """TRL's ``rollout_func``: the step's prompts played as episodes of the user's agent (see the module docstring).

    Args:
        program: the user's agent.
        store: where episodes and calls are recorded.
        instances: the training instances, by the JSON of their GRPO prompt.
        settings: the episode limits.
        run_prefix: each step's episodes are run ``<run_prefix>-step<N>``.
        rl: the RL settings (temperature, seed).
        max_new_tokens: tokens per model call.
        concurrency: episodes in flight.
        on_step: called with each step's output (what the loss is computed on) and its run id.
    """

    def __init__(
        self,
        program: AgentProgram,
        store: Store,
        instances: dict[str, Instance],
        settings: RolloutSettings,
        run_prefix: str,
        rl: RLSettings,
        *,
        max_new_tokens: int,
        concurrency: int = 8,
        on_step: Callable[[dict[str, list[Any]], str], None] | None = None,
    ) -> None:
        self.on_step = on_step
        self.program, self.store, self.instances, self.settings = program, store, instances, settings
        self.run_prefix, self.rl, self.max_new_tokens, self.concurrency = run_prefix, rl, max_new_tokens, concurrency
        self.merged: list[bool] = []  # per episode with ids: whether its calls merged into one sequence

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        step = trainer.state.global_step
        run_id = f"{self.run_prefix}-step{step}"
        seen: Counter = Counter()
        items = []
        for prompt in prompts:
            instance = self.instances[to_json(prompt)]
            items.append(AgentItem(registry.make(instance.bootcamp), instance, seen[instance.id]))
            seen[instance.id] += 1
        model = trainer.accelerator.unwrap_model(trainer.model)
        backend = LiveBackend(
            model,
            trainer.processing_class,
            model_id=self.run_prefix,
            max_new_tokens=self.max_new_tokens,
            temperature=self.rl.temperature,
            seed=self.rl.seed * 1_000_003 + step,
        )
        self.store.start_run(run_id, "rl-rollout", {"agent": self.program.spec, "step": step}, self.run_prefix)
        since = now()
        runner = AgentRunner(self.program, backend, self.store, self.settings, run_id, concurrency=self.concurrency)
        training = model.training
        model.eval()
        try:
            episodes = asyncio.run(runner.run(items))
        finally:
            model.train(training)
        self.store.write_episodes(episodes)
        self.store.finish_run(run_id, "completed", {"episodes": len(episodes)})
        output = self._completions(episodes, since, trainer.processing_class)
        if self.on_step is not None:
            self.on_step(output, run_id)
        return output

    def _completions(self, episodes: Sequence[Episode], since: Any, tokenizer: Any) -> dict[str, list[Any]]:
        calls = [c for c in read_calls(self.store, [e.id for e in episodes]) if c["started_at"] >= since]
        sequences: dict[str, list[Any]] = {}
        for sequence in merge_calls(calls):
            sequences.setdefault(sequence.episode_id, []).append(sequence)
        out: dict[str, list[Any]] = {
            k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "reward", "episode_id")
        }
        for episode in episodes:
            found = sequences.get(episode.id)
            if found:
                self.merged.append(len(found) == 1)
            if not found or episode.termination == Termination.INFRA_ERROR:
                # nothing of the model's to learn from: one masked token keeps the group's shape
                prompt, completion, mask, logprobs = [tokenizer.eos_token_id], [tokenizer.eos_token_id], [0], [0.0]
            else:
                s = found[-1]  # the sequence that reached the end
                cut = s.generated.index(1)
                prompt, completion = s.ids[:cut], s.ids[cut:]
                mask, logprobs = s.generated[cut:], s.logprobs[cut:]
            out["prompt_ids"].append(prompt)
            out["completion_ids"].append(completion)
            out["env_mask"].append(mask)
            out["logprobs"].append(logprobs)
            out["reward"].append(float(episode.reward))
            out["episode_id"].append(episode.id)
        return out


def verifier_reward(completions: list[Any], reward: list[float], **_: Any) -> list[float]:
    """The reward of each completion: its episode's, from the bootcamp's verifier (the rollout hook's field)."""
    return list(reward)


def agent_rl_rows(instances: Sequence[Instance]) -> tuple[list[dict[str, Any]], dict[str, Instance]]:
    """GRPO rows (the instance's prompt messages; the agent builds its own from the task) and the instances
    by the JSON of their prompt."""
    rows, by_prompt = [], {}
    for instance in instances:
        prompt = registry.make(instance.bootcamp).prompt(instance)
        rows.append({"prompt": prompt, "instance_id": instance.id})
        by_prompt[to_json(prompt)] = instance
    return rows, by_prompt


def train_agent_rl(
    store: Store,
    workspace: Path,
    base: str,
    instances: Sequence[Instance],
    cfg: RLSettings,
    agent: str,
    settings: RolloutSettings,
    *,
    max_new_tokens: int = 256,
    concurrency: int = 8,
    hardware: Hardware | None = None,
    report_to: Sequence[str] = (),
    save_steps: int | None = None,
    on_step: Callable[[dict[str, list[Any]], str], None] | None = None,
) -> TrainResult:
    """GRPO from checkpoint ``base`` on ``instances``, every rollout an episode of the agent ``agent`` (a command
    or ``module:function``) with the model being trained behind the proxy; returns the registered ``rl``
    checkpoint. ``max_new_tokens``: per model call; ``concurrency``: episodes in flight; ``on_step`` sees each
    step's completions, masks, logprobs and rewards (:class:`AgentRollouts`); ``hardware``, ``report_to`` and
    ``save_steps`` as for :func:`~campflow.training.rl.train_rl`."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    hardware = hardware or resolve_hardware()
    main = is_main_process()
    program = AgentProgram.parse(agent)
    instances = list(instances)
    if not instances:
        raise ValueError("train_agent_rl needs at least one instance")
    assert_not_held_out((i.id for i in instances), store.eval_ids(), store.probe_ids(), what="the RL training set")
    parent = checkpoints.resolve(store, base, record=main)
    model_id = checkpoints.checkpoint_id(
        "rl",
        parent.model_id,
        "agent",
        program.spec,
        sorted(i.id for i in instances),
        cfg.model_dump(),
        max_new_tokens,
        hardware.precision,
        *processes(),
    )
    existing = checkpoints.find(store, model_id)
    if existing is not None:
        return TrainResult(existing, existing.metrics, reused=True)
    final = checkpoints.models_dir(workspace) / model_id
    done = finished_result(store, workspace, final, "rl", parent.model_id, None, report_to, main=main)
    if done is not None:
        return done

    import datasets
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    store.write_instances(instances, split="train")
    rows, by_prompt = agent_rl_rows(instances)
    hardware.select()
    tokenizer = AutoTokenizer.from_pretrained(parent.path, padding_side="left")
    start = starting_model(parent, cfg.lora, hardware)
    tuner = hardware.thread_tuner()
    rollouts = AgentRollouts(
        program,
        store,
        by_prompt,
        settings,
        model_id,
        cfg,
        max_new_tokens=max_new_tokens,
        concurrency=concurrency,
        on_step=on_step,
    )
    limits = EpisodeLimits(cfg.max_completion_length or max_new_tokens, cfg.max_tool_calling_iterations or 1)
    with checkpoints.staging(final, write=main, resume=True) as out:
        args = grpo_arguments(
            cfg,
            hardware,
            trainer_dir(workspace, out, model_id, report_to),
            limits=limits,
            report_to=report_to,
            run_name=model_id,
            save_steps=save_steps,
        )
        trainer = quiet(
            GRPOTrainer(
                model=start.model,
                reward_funcs=[verifier_reward],
                args=args,
                train_dataset=datasets.Dataset.from_list(rows),
                processing_class=tokenizer,
                rollout_func=rollouts,
                peft_config=start.peft_config,
                callbacks=[progress_callback("rl", "RL (agent)"), *threads_callback(tuner)],
            )
        )
        resume = last_checkpoint(Path(args.output_dir))
        started = time.perf_counter()
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        elapsed = time.perf_counter() - started
        trainer.save_model(str(out))
        history = trainer.state.log_history
        rewards = [(h["step"], h["reward"]) for h in history if "reward" in h]
        metrics = {
            "agent": program.spec,
            "steps": trainer.state.global_step,
            "resumed_from_step": resumed_step(resume),
            "seconds": round(elapsed, 1),
            "reward_curve": rewards,
            "loss_curve": [(h["step"], h["loss"]) for h in history if "loss" in h],
            "first_reward": rewards[0][1] if rewards else None,
            "last_reward": rewards[-1][1] if rewards else None,
            "instances": len(instances),
            "merged_share": round(sum(rollouts.merged) / len(rollouts.merged), 4) if rollouts.merged else None,
            "device": hardware.kind,
            "precision": hardware.precision,
            **(tuner.summary() if tuner is not None else {}),
            **adapter_metrics(start, trainer.model, cfg.lora),
        }
        if not main:
            return TrainResult(checkpoints.Checkpoint(model_id, "rl", final, parent.model_id, None, metrics), metrics)
        tokenizer.save_pretrained(str(out))
        mark_trained(out, metrics)
    ckpt = checkpoints.register(store, model_id, "rl", final, parent=parent.model_id, metrics=metrics)
    clear_trainer(final, trainer_dir(workspace, final, model_id, report_to))
    return TrainResult(ckpt, metrics)
