"""Configuration: pydantic models, one per step, loaded from YAML with environment overrides.

``configs/default.yaml`` mirrors these models. Any key can be overridden from the environment as
``CAMPFLOW__<SECTION>__<KEY>`` (e.g. ``CAMPFLOW__ROLLOUT__CONCURRENCY=64``); values are read as YAML.
An invalid value is reported as one line naming the key, the value and what was expected.

The sections of ``training`` that a library has a class for are called settings, not config
(:class:`SFTSettings`, :class:`RLSettings`, :class:`LoRASettings`), so they are never read as TRL's
``SFTConfig`` / ``GRPOConfig`` or PEFT's ``LoraConfig``, which the training code builds from them.

This module is a leaf: it imports nothing else from campflow but the error types and the device pattern
(both leaves too), so every layer may read its configuration from here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from campflow.errors import ConfigError
from campflow.hardware import DEVICE_PATTERN
from campflow.threads import CPU_THREADS_HELP

# ``auto`` (measured while running, campflow/threads.py) or a fixed count
CpuThreads = Annotated[int, Field(ge=1, le=1024)] | Literal["auto"]

ENV_PREFIX = "CAMPFLOW__"


class Section(BaseModel):
    """Base of every config section: unknown keys are errors (a typo must not pass silently)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WorkspaceConfig(Section):
    """Where campflow keeps its data."""

    path: Path = Field(Path("campflow-data"), description="workspace folder: store, datasets, checkpoints")
    db: Path | None = Field(None, description="DuckDB file; default <path>/campflow.duckdb")
    lock_wait_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="seconds a write waits, retrying with backoff, "
        "for another process (a reader such as `campflow sql`) to let go of the store",
    )

    @property
    def db_path(self) -> Path:
        """The store's file."""
        return self.db or self.path / "campflow.duckdb"


class NoiseConfig(Section):
    """Mistakes of the noisy oracle policy."""

    p_wrong_move: float = Field(0.1, ge=0, le=1, description="chance per turn of a plausible wrong step")
    p_malformed: float = Field(0.05, ge=0, le=1, description="chance per turn of a malformed tool call")
    p_wrong_answer: float = Field(0.2, ge=0, le=1, description="chance per episode of a wrong final answer")
    seed: int = Field(0, description="seed of every noisy decision")


class PolicyConfig(Section):
    """The agent under evaluation."""

    kind: Literal["oracle", "demonstrator", "noisy", "openai", "local"] = Field(
        "oracle", description="which policy (demonstrator: the grounded teacher; oracle: privileged)"
    )
    model: str | None = Field(None, description="endpoint model name, or a local model path (kind=local)")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key, if any")
    temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature")
    max_tokens: int = Field(512, ge=1, le=1_000_000, description="completion tokens per turn")
    timeout: float = Field(60.0, gt=0, description="seconds per request before it is retried")
    max_retries: int = Field(4, ge=0, le=20, description="retries (with backoff) before infra_error")
    transport: Literal["aiohttp", "httpx"] = Field(
        "aiohttp",
        description="aiohttp: campflow's own client (the SDK's retries, least CPU a call); httpx: the openai SDK's "
        "client (honours a proxy set in the environment)",
    )
    send_reasoning: bool = Field(False, description="send earlier turns' reasoning back to the model")
    batch_size: int = Field(16, ge=1, le=1024, description="local models: sequences generated together")
    device: str = Field(
        "auto",
        pattern=DEVICE_PATTERN,
        description="local models: auto | cpu | cuda | cuda:N | mps (auto: CUDA, then MPS, then the CPU)",
    )
    precision: Literal["auto", "bf16", "fp16", "fp32"] = Field(
        "auto",
        description="local models: weights' precision "
        "(auto: bf16 where the GPU has it, fp16 on other CUDA "
        "GPUs, fp32 on a CPU)",
    )
    cpu_threads: CpuThreads = Field("auto", description="local models: " + CPU_THREADS_HELP)
    noise: NoiseConfig = Field(default_factory=NoiseConfig, description="kind=noisy: its mistakes")


class RolloutConfig(Section):
    """How episodes run."""

    concurrency: int = Field(32, ge=1, le=4096, description="episodes in flight per worker")
    workers: int = Field(2, ge=1, le=256, description="parallel rollout tasks (threads, or Ray/Dask workers)")
    shard_size: int = Field(64, ge=1, le=100_000, description="episodes per rollout task, written as one batch")
    task_runner: Literal["threads", "ray", "dask"] = Field("threads", description="Prefect task runner")
    ray_address: str | None = Field(None, description="Ray cluster address; None starts a local Ray")
    max_turns: int | None = Field(None, ge=1, le=1000, description="turn budget; None: each bootcamp's own")
    episode_timeout: float = Field(300.0, gt=0, description="wall-clock seconds per episode")
    max_consecutive_errors: int = Field(3, ge=1, le=100, description="turns in a row without a usable call")
    max_calls_per_turn: int = Field(8, ge=1, le=64, description="tool calls run per turn")
    max_reply_chars: int = Field(32_000, ge=100, description="longer replies are a format error")
    max_observation_chars: int = Field(8_000, ge=100, description="observations are truncated past this")
    max_context_tokens: int | None = Field(None, ge=64, description="token budget per conversation")
    observation: Literal["auto", "image", "text"] = Field(
        "auto",
        description="how vision bootcamps show the world: auto (images to a vision-language or endpoint "
        "model, text to a text-only local model), image or text",
    )
    agent: str | None = Field(
        None,
        description="a user's agent program plays every episode of the model (a command 'python my_agent.py' "
        "or module:function), the model behind the recording proxy (docs/agents.md); null: campflow's own loop",
    )


class EvalConfig(Section):
    """What an evaluation covers."""

    bootcamps: list[str] = Field(["calculator", "maze"], min_length=1, description="bootcamps to evaluate")
    n: int = Field(50, ge=1, le=1_000_000, description="eval-split instances per bootcamp")
    samples: int = Field(1, ge=1, le=1024, description="episodes per instance")
    levels: list[int] | None = Field(None, description="only these levels; None: all")


class CopyPretrainingConfig(Section):
    """Copy pretraining of an embedded model right after initialization (campflow/training/copying.py):
    random token strings repeated after a separator, the stand-in for a real model's pretraining."""

    steps: int = Field(400, ge=0, le=1_000_000, description="training steps; 0 leaves the model as initialized")
    batch_size: int = Field(32, ge=1, le=4096, description="sequences per step")
    length: int = Field(24, ge=4, le=1024, description="longest string copied, in tokens (each step draws 4..length)")
    learning_rate: float = Field(1e-3, gt=0, le=1, description="AdamW learning rate after 20 warmup steps")


class ReadingPretrainingConfig(Section):
    """Reading pretraining of the embedded vision-language model after copy pretraining
    (campflow/training/reading.py): a vision bootcamp's image-mode prompt in, the same task's text view out."""

    steps: int = Field(1000, ge=0, le=1_000_000, description="training steps (~4-5 min on 2 CPU cores); 0 skips it")
    batch_size: int = Field(8, ge=1, le=4096, description="examples per step")
    instances: int = Field(1000, ge=1, le=1_000_000, description="train-split instances per vision bootcamp")
    learning_rate: float = Field(1e-3, gt=0, le=1, description="AdamW learning rate after 20 warmup steps")
    levels: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="levels the frames come from (those a bootcamp has); null: every level"
    )


class TinyModelConfig(Section):
    """The embedded default model, built locally (no download)."""

    seed: int = Field(0, description="seed of the corpus, the tokenizer and the initial weights")
    vocab_size: int = Field(4096, ge=300, le=65_536, description="BPE vocabulary size, special tokens included")
    hidden_size: int = Field(192, ge=16, le=4096, description="model width")
    intermediate_size: int = Field(512, ge=16, le=16_384, description="MLP width")
    layers: int = Field(4, ge=1, le=64, description="transformer layers")
    heads: int = Field(6, ge=1, le=64, description="attention heads (hidden_size must divide evenly)")
    kv_heads: int = Field(2, ge=1, le=64, description="key/value heads (grouped-query attention)")
    max_positions: int = Field(2048, ge=128, le=131_072, description="longest sequence, in tokens")
    corpus_per_level: int = Field(
        60, ge=1, le=100_000, description="demonstration episodes per level for the tokenizer"
    )
    chat_template: Literal["qwen2.5", "qwen3"] = Field(
        "qwen2.5",
        description="TRL's template the model speaks: qwen2.5 (all turns alike) or qwen3 (thinking: <think> blocks)",
    )
    pretrain: CopyPretrainingConfig = Field(default_factory=CopyPretrainingConfig, description="copy pretraining")


class TinyVisionModelConfig(Section):
    """The embedded vision-language model (``improve.model: embedded-vl``): a tiny Qwen3-VL built locally."""

    seed: int = Field(0, description="seed of the corpus, the tokenizer and the initial weights")
    vocab_size: int = Field(4096, ge=300, le=65_536, description="BPE vocabulary size, special tokens included")
    hidden_size: int = Field(192, ge=16, le=4096, description="language model width")
    intermediate_size: int = Field(512, ge=16, le=16_384, description="language model MLP width")
    layers: int = Field(4, ge=1, le=64, description="language model layers")
    heads: int = Field(6, ge=1, le=64, description="attention heads (hidden_size must divide evenly)")
    kv_heads: int = Field(2, ge=1, le=64, description="key/value heads (grouped-query attention)")
    max_positions: int = Field(
        4096, ge=256, le=131_072, description="longest sequence in tokens, image tokens included"
    )
    vision_hidden_size: int = Field(96, ge=16, le=4096, description="vision tower width")
    vision_intermediate_size: int = Field(256, ge=16, le=16_384, description="vision tower MLP width")
    vision_layers: int = Field(2, ge=1, le=64, description="vision tower layers")
    vision_heads: int = Field(4, ge=1, le=64, description="vision tower attention heads")
    patch_size: int = Field(16, ge=4, le=64, description="pixels per side of a vision patch")
    max_image_pixels: int = Field(
        192 * 192,
        ge=4096,
        le=16_777_216,
        description="images are resized to at most this many pixels, sides multiples of 2 patches (each 2x2 "
        "patches become one image token: a 258x280 gridworld frame becomes 160x192, 30 tokens at patch 16)",
    )
    corpus_per_level: int = Field(
        30, ge=1, le=100_000, description="demonstration episodes per level for the tokenizer"
    )
    pretrain: CopyPretrainingConfig = Field(
        default_factory=CopyPretrainingConfig, description="copy pretraining of the language model"
    )
    read: ReadingPretrainingConfig = Field(
        default_factory=ReadingPretrainingConfig, description="reading pretraining: frames to their text views"
    )


class FilterConfig(Section):
    """Which episodes become training data."""

    min_reward: float = Field(1.0, ge=0, le=1, description="keep episodes with at least this reward")
    solved_only: bool = Field(True, description="keep only episodes that ended as solved")
    valid_calls_only: bool = Field(True, description="drop episodes with any invalid tool call")
    max_turns: int | None = Field(None, ge=1, description="drop episodes with more turns")
    max_chars: int | None = Field(6000, ge=100, description="drop episodes whose transcript text is longer")
    dedupe: bool = Field(True, description="keep one episode per (instance, action sequence)")
    max_per_bootcamp: int | None = Field(None, ge=1, description="cap per bootcamp (balance); None: no cap")
    balance: bool = Field(True, description="cap every bootcamp at the smallest bootcamp's count times 2")


class LoRASettings(Section):
    """A LoRA adapter trained through PEFT instead of every weight (``null`` in the config: full fine-tuning)."""

    r: int = Field(16, ge=1, le=4096, description="rank of the update matrices")
    alpha: float = Field(32.0, gt=0, description="scaling: the update is multiplied by alpha / r")
    dropout: float = Field(0.05, ge=0, lt=1, description="dropout on the adapter's input")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="module names that get adapters (e.g. [q_proj, v_proj]); all-linear: every "
        "linear layer but the output head",
    )


class SFTSettings(Section):
    """Supervised fine-tuning with TRL's SFTTrainer (assistant-only loss)."""

    max_steps: int = Field(800, ge=1, description="optimizer steps")
    batch_size: int = Field(16, ge=1, description="sequences per step")
    learning_rate: float = Field(1e-3, gt=0, description="peak learning rate (cosine decay, warmup)")
    warmup_ratio: float = Field(0.05, ge=0, le=1, description="share of steps spent warming up")
    gradient_checkpointing: bool = Field(
        False,
        description="recompute activations in the backward pass to save "
        "memory (large models); TRL turns it on by default, which only costs the "
        "tiny model time",
    )
    fused_loss: bool = Field(
        False,
        description="TRL's chunked lm-head loss kernel (saves GPU memory on large "
        "vocabularies); off: the model's own cross-entropy, ~1.5x faster for the tiny model",
    )
    gradient_accumulation_steps: int = Field(
        1,
        ge=1,
        description="batches accumulated per optimizer step (the effective batch is batch_size x this x processes)",
    )
    group_by_length: bool = Field(
        False,
        description="batch sequences of similar length together (transformers' "
        "LengthGroupedSampler): ~2-3x less SFT time on the embedded default, but its one-bootcamp "
        "batches measured worse on calculator (0/20 vs 6/20 on level 1)",
    )
    lora: LoRASettings | None = Field(None, description="train a LoRA adapter (PEFT); null: full fine-tuning")
    seed: int = Field(0, description="data order and dropout seed")


class RLSettings(Section):
    """Reinforcement learning with TRL's GRPOTrainer, bootcamps as environments."""

    max_steps: int = Field(60, ge=1, description="optimizer steps")
    num_generations: int = Field(8, ge=2, description="rollouts per prompt (the GRPO group)")
    prompts_per_step: int = Field(4, ge=1, description="distinct prompts per step")
    learning_rate: float = Field(2e-5, gt=0, description="learning rate")
    beta: float = Field(0.0, ge=0, description="KL penalty against the starting model")
    loss_type: str = Field(
        "dapo",
        description="TRL's GRPO loss normalization: dapo (per token over the batch), grpo (per rollout, then the mean), "
        "dr_grpo (by a global constant, with scale_rewards none: Dr. GRPO), bnpo, cispo, sapo; TRL validates the name",
    )
    epsilon: float = Field(0.2, gt=0, lt=1, description="TRL's clip range of the importance ratio, below")
    epsilon_high: float | None = Field(
        None, gt=0, lt=1, description="the clip range above (DAPO's clip-higher, e.g. 0.28); null: epsilon"
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="TRL's advantage scaling: by the group's reward std, the batch's, or none (Dr. GRPO)"
    )
    drop_equal_groups: bool = Field(
        False,
        description="groups whose rewards are all equal (no advantage) leave the loss and its token count, so "
        "they do not dilute the groups that teach (DAPO's dynamic sampling without the refill)",
    )
    band_balance: bool = Field(
        False,
        description="improve: no (level, divergence kind) group of the band takes more than an equal share of RL's "
        "prompts (the kind: the commonest of its failed calibration samples)",
    )
    temperature: float = Field(1.0, gt=0, description="sampling temperature of rollouts")
    max_completion_length: int | None = Field(
        None,
        ge=8,
        description="tokens per rollout after the prompt, the model's turns and tool results (TRL counts both); "
        "null: twice the longest grounded demonstration of the prompts",
    )
    max_tool_calling_iterations: int | None = Field(
        None, ge=1, description="tool rounds per rollout; null: the bootcamps' turn budget, as evaluation plays them"
    )
    instances_per_bootcamp: int = Field(
        256,
        ge=1,
        description="train-split instances per bootcamp calibrated "
        "for the learnable band (improve), or offered as prompts (campflow train)",
    )
    band_samples: int = Field(
        4,
        ge=2,
        description="improve: samples per instance (at the RL temperature) to find "
        "the learnable band, 0 < pass@k < 1, and to measure RL's effect on held-out band "
        "instances",
    )
    band_holdout: float = Field(
        0.25,
        ge=0,
        lt=1,
        description="improve: share of the band held out of RL to measure the SFT and RL checkpoints on",
    )
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass to save memory (large models)"
    )
    per_device_batch_size: int | None = Field(
        None, ge=1, description="completions per device per step; null: num_generations x prompts_per_step"
    )
    gradient_accumulation_steps: int = Field(1, ge=1, description="batches accumulated per optimizer step")
    use_vllm: bool = Field(False, description="generate rollouts with vLLM (TRL's integration; needs vllm)")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate", description="colocate: vLLM inside the training processes; server: a `trl vllm-serve` server"
    )
    vllm_server_base_url: str | None = Field(None, description="vllm_mode server: its URL, e.g. http://host:8000")
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="vllm_mode colocate: share of GPU memory vLLM may take"
    )
    lora: LoRASettings | None = Field(None, description="train a LoRA adapter (PEFT); null: full fine-tuning")
    seed: int = Field(0, description="sampling and data order seed")


TEACHERS = ("oracle", "self", "endpoint", "self+oracle", "endpoint+oracle")


class TeacherEndpointConfig(Section):
    """A stronger model behind an OpenAI-compatible endpoint (``training.teacher: endpoint``)."""

    model: str | None = Field(None, description="the endpoint's model name, e.g. Qwen/Qwen3-32B")
    base_url: str | None = Field(None, description="e.g. http://localhost:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding its key, if any")
    temperature: float = Field(0.7, ge=0, le=2, description="sampling temperature of its episodes")
    max_tokens: int = Field(2048, ge=1, le=1_000_000, description="completion tokens per turn")


class CorrectionsConfig(Section):
    """On-policy corrections (``training.corrections``): the current model plays train instances and the
    demonstrator labels every state it reaches; SFT trains on them beside the demonstrations."""

    enabled: bool = Field(False, description="collect corrections each cycle and train on them (DAgger)")
    follow: Literal["demonstrator", "model"] = Field(
        "demonstrator",
        description="who acts after the model's first disagreement with the demonstrator: demonstrator (back "
        "on a correct path) or model (its own mistakes lead on)",
    )
    n: int = Field(64, ge=1, description="train-split instances per bootcamp the model plays for corrections")
    aggregate: bool = Field(True, description="train on the corrections of every cycle so far, not this one's alone")


class TrainingConfig(Section):
    """Datasets, the embedded model, SFT and RL."""

    teacher: Literal[TEACHERS] = Field(
        "oracle",
        description="who writes the SFT data: oracle | self (best-of-k "
        "samples of the current model that pass the filter) | endpoint (a "
        "stronger model) | self+oracle / endpoint+oracle (the oracle only for "
        "instances where no model sample passed)",
    )
    self_samples: int = Field(4, ge=1, le=1024, description="teacher self/endpoint: episodes per instance (k)")
    self_temperature: float = Field(0.8, ge=0, le=2, description="teacher self: sampling temperature")
    teacher_endpoint: TeacherEndpointConfig = Field(
        default_factory=TeacherEndpointConfig, description="teacher endpoint: the stronger model"
    )
    exclude_oracle_for_thinking: bool = Field(
        False,
        description="a thinking model (its chat template renders "
        "<think>) trains on no oracle rows, which have no reasoning; they "
        "are marked in the dataset either way (column oracle_no_reasoning)",
    )
    corrections: CorrectionsConfig = Field(
        default_factory=CorrectionsConfig, description="on-policy corrections beside the teacher's transcripts"
    )

    bootcamps: list[str] = Field(["calculator", "maze"], min_length=1, description="bootcamps trained on")
    levels: list[int] | None = Field(
        None,
        description="levels trained on; None: all. The demonstrator's transcripts cover every one from the first "
        "cycle, the model's own practice (self teacher, corrections, RL band) climbs them by the curriculum",
    )
    collect_n: int = Field(400, ge=1, description="train-split instances per bootcamp for teacher collection")
    collect_samples: int = Field(1, ge=1, description="episodes per instance (best-of-k for sampling policies)")
    device: str = Field(
        "auto",
        pattern=DEVICE_PATTERN,
        description="auto | cpu | cuda | cuda:N | mps (auto: CUDA, "
        "then MPS, then the CPU; under accelerate launch each process takes its own GPU)",
    )
    precision: Literal["auto", "bf16", "fp16", "fp32"] = Field(
        "auto", description="auto: bf16 where the GPU has it, fp16 on other CUDA GPUs, fp32 on a CPU"
    )
    cpu_threads: CpuThreads = Field("auto", description=CPU_THREADS_HELP)
    save_steps: int | None = Field(
        None,
        ge=1,
        description="SFT and RL save a resumable checkpoint (weights, optimizer, scheduler, RNG) every this "
        "many steps and keep the last; a killed run resumes from it; null: a tenth of the steps",
    )
    report_to: list[str] = Field(
        [],
        description="experiment trackers, as transformers names them (trackio, "
        "tensorboard, wandb, ...); [] logs to the store only",
    )
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    tiny_vl: TinyVisionModelConfig = Field(
        default_factory=TinyVisionModelConfig, description="the embedded vision-language model (embedded-vl)"
    )
    filter: FilterConfig = Field(default_factory=FilterConfig)
    sft: SFTSettings = Field(default_factory=SFTSettings)
    rl: RLSettings = Field(default_factory=RLSettings)


class SynthesisLLMConfig(Section):
    """The OpenAI-compatible model that proposes variants (synthesizer: llm)."""

    model: str | None = Field(None, description="endpoint model name; required for the llm synthesizer")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key, if any")
    temperature: float = Field(0.7, ge=0, le=2, description="sampling temperature of proposals")
    max_tokens: int = Field(2048, ge=64, le=1_000_000, description="completion tokens per request")
    timeout: float = Field(120.0, gt=0, description="seconds per request before it is retried")
    max_retries: int = Field(2, ge=0, le=20, description="retries (with backoff) before synthesis fails")
    json_schema: bool = Field(True, description="ask for a JSON-schema response_format (dropped if refused)")
    max_requests: int = Field(3, ge=1, le=20, description="requests per cluster until n proposals are read")
    exemplar_chars: int = Field(1500, ge=200, le=100_000, description="characters kept of each exemplar transcript")


class SynthesisConfig(Section):
    """Failure mining, clustering, variant synthesis, validation and the curriculum."""

    synthesizer: Literal["mutate", "llm"] = Field("mutate", description="mutate (offline) or llm")
    n_per_cluster: int = Field(8, ge=1, le=1000, description="proposals asked for per cluster")
    min_cluster_size: int = Field(2, ge=1, description="clusters with fewer failures get no variants")
    max_clusters: int = Field(8, ge=1, le=100, description="most clusters per bootcamp (the data picks how many)")
    exemplars: int = Field(3, ge=1, le=20, description="exemplar episodes kept per cluster")
    instances_per_variant: int = Field(4, ge=1, le=1000, description="train instances generated per variant")
    probes_per_variant: int = Field(
        2,
        ge=0,
        le=1000,
        description="held-out probe instances (split probe, fresh "
        "seeds) per accepted variant: before/after of the cycle, never trained on",
    )
    share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="fraction of the instances collected per bootcamp that "
        "come from this cycle's accepted variants (the rest are generated: at every training.levels for the "
        "demonstrator, at curriculum levels for a model teacher)",
    )
    calibration_samples: int = Field(
        4,
        ge=0,
        le=1000,
        description="episodes per variant to estimate the current model's pass rate; 0 skips calibration",
    )
    band_min: float = Field(0.1, ge=0, le=1, description="variants the model passes less often are too hard")
    band_max: float = Field(0.9, ge=0, le=1, description="variants the model passes more often are too easy")
    curriculum_up: float = Field(0.8, ge=0, le=1, description="train pass rate at or above which the level rises")
    curriculum_down: float = Field(0.3, ge=0, le=1, description="train pass rate below which the level falls")
    seed: int = Field(0, description="seed of clustering and mutation")
    llm: SynthesisLLMConfig = Field(default_factory=SynthesisLLMConfig, description="synthesizer: llm")

    @model_validator(mode="after")
    def _ordered(self) -> SynthesisConfig:
        if self.band_min > self.band_max:
            raise ValueError(f"band_min = {self.band_min} must not exceed band_max = {self.band_max}")
        if self.curriculum_down > self.curriculum_up:
            raise ValueError(
                f"curriculum_down = {self.curriculum_down} must not exceed curriculum_up = {self.curriculum_up}"
            )
        return self


class ImproveConfig(Section):
    """One improvement cycle: evaluate, mine, synthesize, collect, filter, SFT, RL, re-evaluate, promote."""

    model: str = Field(
        "embedded",
        description="model to start from when none is promoted yet: 'embedded' "
        "(the tiny local model), 'embedded-vl' (the tiny vision-language model) or a local model folder",
    )
    metric: Literal["pass_rate", "mean_reward"] = Field("pass_rate", description="what decides promotion")
    min_improvement: float = Field(
        0.0, ge=0, le=1, description="promote only if the metric rises by more than nothing and by at least this"
    )
    max_regression: float = Field(
        0.05,
        ge=0,
        le=1,
        description="promote only if no bootcamp and no level of one "
        "falls by more than this on the eval split (pass rate)",
    )
    cycles: int = Field(
        1, ge=1, le=1000, description="cycles `campflow improve` runs, each from the last promoted model"
    )
    rl: bool = Field(
        False,
        description="run RL (GRPO) after SFT; the held-out band then decides between the two checkpoints. Off by "
        "default: on the miniature it has not beaten SFT on as many more demonstrations (benchmarks/RESULTS.md, "
        "'Learning recipes'); on: for a model whose failures no demonstrator can label (an LLM judge's reward, "
        "an import without an oracle)",
    )
    max_suspicious_increase: float = Field(
        0.1,
        ge=0,
        le=1,
        description="promote only if no bootcamp's share of successes with one suspicious-success flag "
        "(fewer turns than the grounded demonstrator, ungrounded arguments, an answer the oracle disputes) "
        "rises by more than this on the eval split",
    )
    rl_min_gain: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the RL checkpoint is the candidate only if it beats its SFT checkpoint on held-out band "
        "instances by more than nothing and by at least this (pass rate); else the SFT checkpoint is",
    )
    eval_variants: bool = Field(
        True, description="run the starting model and the candidate on the accepted variants' held-out probes"
    )
    variant_eval_n: int = Field(64, ge=1, description="most probe instances each of the two models runs on")
    curriculum_n: int = Field(
        8,
        ge=0,
        description="fresh train instances per bootcamp, at its curriculum level, "
        "the candidate plays so the curriculum can step; 0: probes only",
    )
    reports_dir: Path = Field(Path("reports"), description="where cycle reports are written")
    inspect_logs: bool = Field(
        False,
        description="also write every run of a cycle as an Inspect AI eval log into <reports_dir>/<cycle>/inspect "
        "(`inspect view` shows them; needs the view extra)",
    )
    cron: str = Field("0 3 * * *", description="schedule of `campflow serve` for improve (cron, server time)")


class WatchConfig(Section):
    """Retraining when new model failures accumulate."""

    threshold: int = Field(50, ge=1, description="new model failures since the last training that start a cycle")
    interval_seconds: int = Field(3600, ge=1, description="how often `campflow serve` runs watch")
    production_threshold: int | None = Field(
        None, ge=1, description="judged production failures since the last training that start a cycle (None: off)"
    )
    production_cluster_threshold: int | None = Field(
        None, ge=1, description="judged production failures of one cluster that start a cycle (None: off)"
    )


class RedactionConfig(Section):
    """What the production proxy keeps out of every record (spool and store alike)."""

    drop_system_prompts: bool = Field(False, description="record system messages without their content")
    mask_patterns: list[str] = Field(
        default_factory=list, description="regular expressions masked in every recorded string (emails, keys, ...)"
    )
    mask: str = Field("[redacted]", description="what a masked match is replaced by")


class JudgeConfig(Section):
    """The LLM judge of production episodes: a group of alike episodes scored against each other."""

    model: str | None = Field(None, description="endpoint model name; required for `campflow proxy judge --llm`")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key, if any")
    rubric: str = Field(
        "Score how well the assistant served the user: 1 for a request fully and correctly done, 0 for a wrong, "
        "harmful or abandoned one; a clearly better episode scores higher than a worse one in the same group.",
        description="what the judge scores against",
    )
    group_size: int = Field(8, ge=2, le=64, description="episodes judged together, each against the others")
    timeout: float = Field(120.0, gt=0, description="seconds per request")
    transcript_chars: int = Field(4000, ge=200, le=200_000, description="characters kept of each transcript")


class ProductionConfig(Section):
    """A deployed agent's traffic: `campflow proxy serve` in front of its endpoint, then judging."""

    upstream: str | None = Field(None, description="the OpenAI-compatible base URL served, e.g. http://vllm:8000/v1")
    host: str = Field("127.0.0.1", description="interface the proxy listens on")
    port: int = Field(8400, ge=0, le=65535, description="port the proxy listens on (0: any free one)")
    spool_dir: Path = Field(Path("campflow-data/spool"), description="the local append-only spool's folder")
    upstream_timeout: float = Field(600.0, gt=0, description="seconds the proxy waits for the upstream")
    feedback_key: str | None = Field(None, description="bearer key POST .../feedback must carry (None: any)")
    redaction: RedactionConfig = Field(default_factory=RedactionConfig)
    bootcamp: str = Field("production", description="the name production episodes are filed under")
    fail_below: float = Field(0.5, ge=0, le=1, description="a judged score below this is a failure")
    reward: str | None = Field(None, description="module:function or file.py:function scoring a transcript")
    judge: JudgeConfig = Field(default_factory=JudgeConfig)


class AuthorLLMConfig(Section):
    """The OpenAI-compatible model that writes bootcamp modules (``campflow author``)."""

    model: str | None = Field(None, description="endpoint model name; required by campflow author (--model)")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key, if any")
    temperature: float = Field(0.2, ge=0, le=2, description="sampling temperature of each module written")
    max_tokens: int = Field(8192, ge=256, le=1_000_000, description="completion tokens per reply (a whole module)")
    timeout: float = Field(300.0, gt=0, description="seconds per request before it is retried")
    max_retries: int = Field(2, ge=0, le=20, description="retries (with backoff) before authoring fails")


class SandboxConfig(Section):
    """Limits of the sandboxed process that runs the contract on a module an LLM wrote.

    The process runs in a fresh temporary folder (its cwd, HOME and TMPDIR), under these rlimits, inside
    new user, network and PID namespaces where ``unshare`` allows them, and behind an audit hook that
    refuses sockets, new processes and writes outside its folder (:mod:`campflow.authoring.confine`).
    """

    wall_s: float = Field(120.0, gt=0, le=86_400, description="wall-clock seconds per sandboxed process")
    cpu_s: int = Field(120, ge=1, le=86_400, description="CPU seconds per sandboxed process (RLIMIT_CPU)")
    memory_mb: int = Field(1024, ge=128, le=1_048_576, description="address space in MiB (RLIMIT_AS)")
    file_mb: int = Field(16, ge=1, le=1_048_576, description="largest file it may write, in MiB (RLIMIT_FSIZE)")
    max_processes: int = Field(
        0,
        ge=0,
        le=4096,
        description="RLIMIT_NPROC (0: no process or thread of its own; root is exempt, where the audit "
        "hook and the PID namespace hold the line)",
    )
    namespaces: Literal["auto", "on", "off"] = Field(
        "auto",
        description="run inside `unshare -rnp` (no network, own PIDs): auto where it works here, on: "
        "refuse to run without, off: audit hook and rlimits only",
    )
    root: Path | None = Field(None, description="where sandbox folders are made (None: the system temp folder)")


class AuthorConfig(Section):
    """LLM-authored bootcamps: the model, the repair rounds, the contract's size and the sandbox."""

    rounds: int = Field(3, ge=0, le=20, description="repair rounds after the first module (failures go back)")
    instances: int = Field(
        200, ge=200, le=100_000, description="instances per level the oracle must solve (and the checks use)"
    )
    llm: AuthorLLMConfig = Field(default_factory=AuthorLLMConfig, description="the model that writes modules")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="where the contract runs")


DEFAULT_LAUNCH_COMMAND = (
    "vllm serve {path} --port {port} --served-model-name {name} --enable-auto-tool-choice --tool-call-parser hermes"
)


class ServingConfig(Section):
    """How rollout steps reach a checkpoint: in-process, a server launched for it, or a running endpoint.

    The launch ``command`` is a template; its placeholders are ``{path}`` (the checkpoint folder; for a
    LoRA adapter, its base model's folder with ``{adapter}`` the adapter's), ``{port}`` (the port picked
    or configured), ``{name}`` (the name the model is served and recorded under: the checkpoint id),
    ``{host}`` (always 127.0.0.1) and ``{python}`` (this interpreter, for Python servers such as
    ``{python} -m vllm.entrypoints.openai.api_server``).
    """

    kind: Literal["inprocess", "launch", "endpoint"] = Field(
        "inprocess",
        description="inprocess: the local "
        "policy in the flow process; launch: start a server "
        "per checkpoint from `command`; endpoint: a running "
        "server at base_url",
    )
    command: str = Field(
        DEFAULT_LAUNCH_COMMAND,
        min_length=1,
        description="kind=launch: the server's command "
        "line, with {path} {port} {name} {host} {python} {adapter} placeholders",
    )
    port: int | None = Field(None, ge=1, le=65_535, description="kind=launch: the port; None picks a free one")
    startup_timeout: float = Field(600.0, gt=0, description="kind=launch: seconds to wait for GET /v1/models")
    log_dir: Path | None = Field(
        None, description="kind=launch: where server logs go; default <workspace>/serving-logs"
    )
    base_url: str | None = Field(None, description="kind=endpoint: the server, e.g. http://localhost:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="kind=endpoint: environment variable holding its key")
    model: str | None = Field(
        None, description="kind=endpoint: the served base model's name (None: the first that GET /v1/models lists)"
    )
    runtime_lora: bool = Field(
        True,
        description="kind=endpoint: load adapter checkpoints at runtime "
        "(POST /v1/load_lora_adapter; vLLM needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)",
    )


class HackerConfig(Section):
    """The adversarial pass (``integrity.hacker``): a model told to earn reward without solving the task,
    played wherever the hack battery runs (:mod:`campflow.integrity.hacker`). Off while ``model`` is unset."""

    model: str | None = Field(None, description="endpoint model name; unset: no adversarial pass")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key, if any")
    episodes: int = Field(4, ge=1, le=10_000, description="episodes per level (per variant: over its instances)")
    temperature: float = Field(1.0, ge=0, le=2, description="sampling temperature (varied tries find more)")
    max_tokens: int = Field(1024, ge=1, le=1_000_000, description="completion tokens per turn")
    timeout: float = Field(120.0, gt=0, description="seconds per request before it is retried")
    max_retries: int = Field(2, ge=0, le=20, description="retries (with backoff) before the pass fails")
    concurrency: int = Field(8, ge=1, le=1024, description="episodes in flight")

    @property
    def enabled(self) -> bool:
        """Whether the pass runs (a model is configured)."""
        return bool(self.model)


class IntegrityConfig(Section):
    """Reward integrity: what tests a verifier before it enters the loop, beside the hack battery."""

    hacker: HackerConfig = Field(default_factory=HackerConfig, description="the adversarial pass with a model")


class CampflowConfig(Section):
    """The whole configuration."""

    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    improve: ImproveConfig = Field(default_factory=ImproveConfig)
    watch: WatchConfig = Field(default_factory=WatchConfig)
    production: ProductionConfig = Field(default_factory=ProductionConfig)
    author: AuthorConfig = Field(default_factory=AuthorConfig)
    integrity: IntegrityConfig = Field(default_factory=IntegrityConfig)


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None, env: dict[str, str] | None = None
) -> CampflowConfig:
    """Read ``path`` (or defaults), apply ``CAMPFLOW__*`` environment variables, then ``overrides``.

    ``overrides`` uses dotted keys: ``{"rollout.concurrency": 8}``; None values are skipped.

    Raises:
        ConfigError: one line naming the file, the key, the value and what was expected.
    """
    source = str(path) if path else "defaults"
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        if p.is_dir():
            raise ConfigError(f"config file {p} is a directory; expected a YAML file")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{p}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start : exc.start + 1]!r}); "
                "expected a YAML file"
            ) from None
        except OSError as exc:
            raise ConfigError(f"config file {p} cannot be read: {exc.strerror or exc}") from None
        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: expected a mapping of sections at the top, got {type(loaded).__name__}")
        data = loaded
    for key, raw in sorted((env if env is not None else os.environ).items()):
        if key.startswith(ENV_PREFIX):
            dotted = key[len(ENV_PREFIX) :].lower().replace("__", ".")
            try:
                value = yaml.safe_load(raw) if raw != "" else None
            except yaml.YAMLError as exc:
                shown = raw if len(raw) <= 60 else raw[:57] + "..."
                raise ConfigError(f"${key} = {shown!r}: not valid YAML: {str(exc).splitlines()[0]}") from None
            _set(data, dotted, value)
            source += f" + ${key}"
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set(data, dotted, value)
    try:
        return CampflowConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_config_error(exc)}") from None


def as_config(value: CampflowConfig | dict[str, Any] | str | Path) -> CampflowConfig:
    """A config from what a flow may receive: the object, its JSON form, or the path of a YAML file
    (deployments pass parameters as JSON)."""
    if isinstance(value, CampflowConfig):
        return value
    if isinstance(value, str | Path):
        return load_config(value)
    try:
        return CampflowConfig.model_validate(value)
    except ValidationError as exc:
        raise ConfigError(f"flow parameters: {format_config_error(exc)}") from None


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"cannot set {dotted}: {part} is not a section")
        node = nxt
    node[parts[-1]] = value


def format_config_error(exc: ValidationError) -> str:
    """The first problem of a config validation error as ``key = value: expected``."""
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        msg = f"{key} is required"
    elif err["type"] == "extra_forbidden":
        msg = f"{key} is not a known setting"
    else:
        msg = f"{key} = {err.get('input')!r}: {err['msg']}"
    more = len(exc.errors()) - 1
    return msg + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")
