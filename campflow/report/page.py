"""The report page: PNG plots (matplotlib, no display needed) and an index.html that shows them."""

from __future__ import annotations

import html
from pathlib import Path

from campflow.report.facts import CycleFacts


def write_report(facts: CycleFacts, out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` and its plots for one cycle; returns the page's path."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server or in CI
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, str]] = []

    def save(fig, name: str, caption: str) -> None:
        fig.savefig(out_dir / name, dpi=110, bbox_inches="tight")  # long labels widen the image, not clip
        plt.close(fig)
        figures.append((name, caption))

    if facts.pass_before or facts.pass_after:
        names = sorted(set(facts.pass_before) | set(facts.pass_after))
        fig, ax = plt.subplots(figsize=(max(4, 1.3 * len(names) + 2), 3.4))
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [facts.pass_before.get(n, 0) for n in names], 0.4, label="before")
        ax.bar([i + 0.2 for i in x], [facts.pass_after.get(n, 0) for n in names], 0.4, label="after")
        ax.set_xticks(list(x), names, rotation=20)
        ax.set_ylim(0, 1)
        ax.set_ylabel("pass rate (eval split)")
        ax.legend()
        save(fig, "pass_rates.png", "Pass rate per bootcamp on the eval split, before and after the cycle")
    if facts.history:
        fig, ax = plt.subplots(figsize=(5, 3))
        xs = range(1, len(facts.history) + 1)
        ax.plot(list(xs), [h[1] or 0 for h in facts.history], marker="o", label="before")
        ax.plot(list(xs), [h[2] or 0 for h in facts.history], marker="o", label="after")
        ax.set_xlabel("cycle")
        ax.set_ylabel("pass rate")
        ax.set_ylim(0, 1)
        ax.legend()
        save(fig, "cycles.png", "Pass rate over cycles")
    if facts.failure_categories:
        labels = [f"{b}: {c}" for b, c, _ in facts.failure_categories[:15]]
        fig, ax = plt.subplots(figsize=(6, 0.35 * len(labels) + 1.2))
        ax.barh(labels[::-1], [n for *_, n in facts.failure_categories[:15]][::-1])
        ax.set_xlabel("failed episodes")
        save(fig, "failure_categories.png", "Failure categories of the evaluation before training")
    if facts.clusters:
        labels = [f"{b}: {lbl[:40]}" for b, lbl, _ in facts.clusters[:15]]
        fig, ax = plt.subplots(figsize=(6, 0.35 * len(labels) + 1.2))
        ax.barh(labels[::-1], [n for *_, n in facts.clusters[:15]][::-1], color="tab:purple")
        ax.set_xlabel("failures in cluster")
        save(fig, "clusters.png", "Failure clusters and their sizes")
    if facts.variants:
        labels = [s if not r else f"{s}: {r}" for s, r, _ in facts.variants]
        fig, ax = plt.subplots(figsize=(6, 0.35 * len(labels) + 1.2))
        colors = ["tab:green" if s == "accepted" else "tab:red" for s, _, _ in facts.variants]
        ax.barh(labels[::-1], [n for *_, n in facts.variants][::-1], color=colors[::-1])
        ax.set_xlabel("proposals")
        save(fig, "variants.png", "Synthesized variants: accepted, and rejected by reason")
    if facts.sft_loss or facts.rl_reward:
        fig, axes = plt.subplots(1, 2, figsize=(8, 3))
        if facts.sft_loss:
            axes[0].plot(*zip(*facts.sft_loss))
        axes[0].set_title("SFT loss")
        axes[0].set_xlabel("step")
        if facts.rl_reward:
            axes[1].plot(*zip(*facts.rl_reward), color="tab:orange")
        axes[1].set_title("RL mean reward")
        axes[1].set_xlabel("step")
        save(fig, "training.png", "Training curves")
    page = out_dir / "index.html"
    page.write_text(_html(facts, figures))
    return page


def _html(facts: CycleFacts, figures: list[tuple[str, str]]) -> str:
    e = html.escape
    decision = {True: "promoted", False: "not promoted", None: "undecided"}[facts.promoted]
    rows = "".join(f"<tr><td>{e(b)}</td><td>{facts.pass_before.get(b, 0):.1%}</td>"
                   f"<td>{facts.pass_after.get(b, 0):.1%}</td></tr>"
                   for b in sorted(set(facts.pass_before) | set(facts.pass_after)))
    imgs = "".join(f'<figure><img src="{e(n)}" alt="{e(c)}"><figcaption>{e(c)}</figcaption></figure>'
                   for n, c in figures)
    before = "n/a" if facts.before_value is None else f"{facts.before_value:.1%}"
    after = "n/a" if facts.after_value is None else f"{facts.after_value:.1%}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>campflow cycle {e(facts.cycle_id)}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}td,th{{padding:4px 12px}}
figure{{display:inline-block;margin:1em}}img{{max-width:440px}}</style></head><body>
<h1>Improvement cycle {e(facts.cycle_id)}</h1>
<p>Status: {e(facts.status)}. Model {e(str(facts.base_model_id))} &rarr; candidate {e(str(facts.candidate_model_id))}:
{e(str(facts.metric))} {before} &rarr; {after}, <b>{decision}</b>.</p>
<table><tr><th>bootcamp</th><th>before</th><th>after</th></tr>{rows}</table>
{imgs}
</body></html>
"""
