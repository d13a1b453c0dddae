"""The report page: one index.html that stands alone (its plots inline as data URLs), the decision first, then
the figures, and per failure cluster what the starting model did and what the candidate does now. The plots are
also written beside it as PNG files, for slides and attachments."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from campflow.report.facts import OUTCOMES, CycleFacts
from campflow.report.html_transcript import TRANSCRIPT_CSS, transcript_html
from campflow.storage.promotion import binomial_se


def write_report(facts: CycleFacts, out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` and its plots for one cycle; returns the page's path."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server or in CI
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, str]] = []  # (data URL, caption)

    def save(fig, name: str, caption: str) -> None:
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=110, bbox_inches="tight")  # long labels widen the image, not clip
        plt.close(fig)
        (out_dir / name).write_bytes(png.getvalue())
        figures.append((f"data:image/png;base64,{base64.b64encode(png.getvalue()).decode()}", caption))

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
    if facts.outcomes:
        names = sorted(facts.outcomes)
        fig, ax = plt.subplots(figsize=(max(4, 1.3 * len(names) + 2), 3.4))
        bottom = [0] * len(names)
        colors = {
            "fixed": "tab:green",
            "regressed": "tab:red",
            "still_failing": "tab:gray",
            "still_passing": "tab:blue",
        }
        for outcome in OUTCOMES:
            counts = [facts.outcomes[n][outcome] for n in names]
            ax.bar(names, counts, bottom=bottom, label=outcome.replace("_", " "), color=colors[outcome])
            bottom = [b + c for b, c in zip(bottom, counts)]
        ax.set_ylabel("eval-split instances")
        ax.legend(fontsize=8)
        save(
            fig, "outcomes.png", "Eval-split instances before vs after: fixed, regressed, still failing, still passing"
        )
    if facts.probes:
        labels = [f"{p['bootcamp']}: {(p['cluster_label'] or '')[:36]}" for p in facts.probes[:15]]
        fig, ax = plt.subplots(figsize=(6, 0.45 * len(labels) + 1.2))
        y = range(len(labels))
        ax.barh([i + 0.2 for i in y], [p["pass_before"] or 0 for p in facts.probes[:15]], 0.4, label="before")
        ax.barh([i - 0.2 for i in y], [p["pass_after"] or 0 for p in facts.probes[:15]], 0.4, label="after")
        ax.set_yticks(list(y), labels)
        ax.set_xlim(0, 1)
        ax.set_xlabel("pass rate on held-out probes")
        ax.legend(fontsize=8)
        save(fig, "probes.png", "Per failure cluster: the variants' held-out probes, starting model vs candidate")
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
    verdict = {True: "promoted", False: "kept", None: "undecided"}[facts.promoted]
    rows = "".join(
        f"<tr><td>{e(b)}</td><td>{facts.pass_before.get(b, 0):.1%}</td><td>{facts.pass_after.get(b, 0):.1%}</td></tr>"
        for b in sorted(set(facts.pass_before) | set(facts.pass_after))
    )
    imgs = "".join(
        f'<figure><img src="{url}" alt="{e(c)}"><figcaption>{e(c)}</figcaption></figure>' for url, c in figures
    )
    before = "n/a" if facts.before_value is None else f"{facts.before_value:.1%}"
    after = "n/a" if facts.after_value is None else f"{facts.after_value:.1%}"
    if facts.comparisons:
        rows = "".join(
            f"<tr><td>{e(c.scope)}</td><td>{c.p_before:.1%} ± {binomial_se(c.p_before, c.n_before):.1%} "
            f"(n={c.n_before})</td><td>{c.p_after:.1%} ± {binomial_se(c.p_after, c.n_after):.1%} (n={c.n_after})</td>"
            f"<td>{100 * c.delta:+.1f} ± {100 * c.se:.1f} points</td></tr>"
            for c in facts.comparisons
        )
    tables = _tables(facts)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>campflow cycle {e(facts.cycle_id)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}td,th{{padding:4px 12px}}
figure{{display:inline-block;margin:1em}}figure img{{max-width:500px}}
#decision{{padding:8px 16px;border-radius:6px;background:#eef6ee}}#decision.kept{{background:#fbf3e4}}
.pair{{display:flex;gap:12px}}.pair>div{{flex:1;min-width:0}}{TRANSCRIPT_CSS}</style></head><body>
<h1>Improvement cycle {e(facts.cycle_id)}</h1>
<section id="decision" class="{verdict}"><h2>Decision: {decision}</h2>
<p class="reason">{e(facts.decision or "not decided yet")}</p>
<p>Status: {e(facts.status)}. Model {e(str(facts.base_model_id))} &rarr; candidate {e(str(facts.candidate_model_id))}:
{e(str(facts.metric))} {before} &rarr; {after}.</p></section>
<h2>Eval split (each rate &plusmn; its binomial standard error; a difference &plusmn; the SE of the difference)</h2>
<table><tr><th>scope</th><th>before</th><th>after</th><th>change</th></tr>{rows}</table>
{tables}
{imgs}
{_exemplars(facts)}
</body></html>
"""


def _exemplars(facts: CycleFacts) -> str:
    """Per failure cluster: an exemplar failure of the starting model beside the candidate on the same task."""
    if not facts.exemplars:
        return ""
    e = html.escape
    out = ["<h2>Failure clusters: what the starting model did, and what the candidate does now</h2>"]
    for x in facts.exemplars:
        if x.after is not None:
            after = (
                f"<h4>candidate ({e(x.after.model_id)}) on {e(x.after_on)}: {e(x.after.termination)}, "
                f"reward {x.after.reward:.2f}</h4>{transcript_html(x.after)}"
            )
        else:
            after = "<h4>candidate</h4><p>The candidate played neither this instance nor a probe of this cluster.</p>"
        out.append(
            f'<section class="cluster" id="cluster-{e(x.cluster_id)}"><h3>{e(x.bootcamp)}: {e(x.label)} '
            f'({x.size} failure{"" if x.size == 1 else "s"})</h3><div class="pair"><div class="before"><h4>starting model '
            f"({e(x.before.model_id)}), level {x.before.level}, instance {e(x.before.instance_id)}: "
            f"{e(x.before.termination)}, reward {x.before.reward:.2f}</h4>{transcript_html(x.before)}</div>"
            f'<div class="after">{after}</div></div></section>'
        )
    return "\n".join(out)


def _tables(facts: CycleFacts) -> str:
    """The outcome, probe, RL and curriculum tables, each only when the cycle has its numbers."""
    e = html.escape
    out = []
    if facts.outcomes:
        head = "".join(f"<th>{o.replace('_', ' ')}</th>" for o in OUTCOMES)
        body = "".join(
            f"<tr><td>{e(b)}</td>" + "".join(f"<td>{counts[o]}</td>" for o in OUTCOMES) + "</tr>"
            for b, counts in sorted(facts.outcomes.items())
        )
        out.append(f"<h2>Outcomes per eval-split instance</h2><table><tr><th>bootcamp</th>{head}</tr>{body}</table>")
    if facts.cluster_outcomes:
        body = "".join(
            f"<tr><td>{e(r['bootcamp'])}</td><td>{e(r['cluster_label'] or '')}</td><td>{r['instances']}</td>"
            f"<td>{r['fixed']}</td><td>{r['still_failing']}</td></tr>"
            for r in facts.cluster_outcomes
        )
        out.append(
            "<h2>Failure clusters of the evaluation before training</h2><table><tr><th>bootcamp</th>"
            f"<th>cluster</th><th>instances</th><th>fixed</th><th>still failing</th></tr>{body}</table>"
        )
    if facts.probes:
        body = "".join(
            f"<tr><td>{e(p['bootcamp'])}</td><td>{e(p['cluster_label'] or '')}</td><td>{p['variants']}</td>"
            f"<td>{p['probes']}</td><td>{p['pass_before']:.1%} ± {binomial_se(p['pass_before'], p['probes']):.1%}</td>"
            f"<td>{p['pass_after']:.1%} ± {binomial_se(p['pass_after'], p['probes']):.1%}</td></tr>"
            for p in facts.probes
        )
        out.append(
            "<h2>Held-out probes of the variants, per cluster</h2><table><tr><th>bootcamp</th><th>cluster</th>"
            f"<th>variants</th><th>probes</th><th>starting model</th><th>candidate</th></tr>{body}</table>"
        )
    if facts.suspicious:

        def share(k: int | None, n: int | None) -> str:
            return f"{int(k or 0)} of {int(n or 0)} ({(k or 0) / n:.0%})" if n else "no successes"

        body = "".join(
            f"<tr><td>{e(r['bootcamp'])}</td><td>{share(r['suspicious_before'], r['solved_before'])}</td>"
            f"<td>{share(r['suspicious_after'], r['solved_after'])}</td></tr>"
            for r in facts.suspicious
        )
        out.append(
            "<h2>Suspicious successes</h2><p>Solved episodes with fewer turns than the grounded demonstrator, "
            "arguments nothing showed, or an answer the oracle disputes (view <code>suspicious_successes</code>)."
            f"</p><table><tr><th>bootcamp</th><th>starting model</th><th>candidate</th></tr>{body}</table>"
        )
    if facts.rl_effect:
        r = facts.rl_effect
        n = r["instances"] * r["samples"]
        se = (binomial_se(r["sft"], n) ** 2 + binomial_se(r["rl"], n) ** 2) ** 0.5
        out.append(
            f"<h2>RL on the learnable band</h2><p>On {r['instances']} held-out band instances x {r['samples']} "
            f"samples: SFT checkpoint {r['sft']:.1%}, RL checkpoint {r['rl']:.1%} "
            f"({100 * (r['rl'] - r['sft']):+.1f} ± {100 * se:.1f} points).</p>"
        )
    elif facts.state.get("rl_band_run") and "rl" in facts.state.get("done", []) and not facts.state.get("rl_model"):
        out.append(
            "<h2>RL on the learnable band</h2><p>No RL: the SFT checkpoint has no learnable band "
            "(no train instance it passes some but not all samples of).</p>"
        )
    if facts.curriculum:
        levels = ", ".join(f"{e(b)} {lv}" for b, lv in sorted(facts.curriculum.items()))
        out.append(f"<p>Curriculum: the next cycle trains up to level {levels}.</p>")
    return "\n".join(out)
