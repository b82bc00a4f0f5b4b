"""The voice benchmark's two plots (matplotlib, drawn on a Figure object: no pyplot, so no
process-wide backend is chosen behind the caller's back).

- latency_histogram.png: perceived latency per configuration, side by side.
- waterfall.png: the typical turn of the first configuration (perceived latency closest to
  its median), read back from its stereo WAV: the user's and the agent's audio around the turn
  end with the budget's marks (green: the session's clock, anchored at its VAD's speech end),
  and below it the budget stages laid end to end from the turn end, each beside its allotment,
  against the latency measured from the audio."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from parley.wav import read_wav


def _typical(rows: list[dict]) -> dict | None:
    measured = [r for r in rows if r["perceived_ms"] is not None]
    if not measured:
        return None
    median = float(np.median([r["perceived_ms"] for r in measured]))
    return min(measured, key=lambda r: abs(r["perceived_ms"] - median))


def histogram(path: Path, results: dict[str, list[dict]]) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    values = {n: [r["perceived_ms"] for r in rows if r["perceived_ms"] is not None] for n, rows in results.items()}
    top = max([600.0, *(v for vs in values.values() for v in vs)])
    bins = np.linspace(0, top * 1.05, 25)
    for name, vs in values.items():
        ax.hist(vs, bins=bins, alpha=0.6, label=f"{name} (n={len(vs)})")
    ax.axvline(600, color="k", ls="--", lw=1, label="600 ms budget")
    ax.set_xlabel("perceived latency (ms): turn end -> first audible agent sample")
    ax.set_ylabel("turns")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    return path


def waterfall(path: Path, row: dict, wav: Path) -> Path:
    from matplotlib.figure import Figure

    stereo, sr = read_wav(wav)
    end, lat = row["turn_end_s"], row["perceived_ms"] / 1000.0
    lo, hi = 0.0, min(len(stereo) / sr, end + lat + 1.0)  # the whole turn: marks reach back to speech start
    t = np.arange(round(lo * sr), round(hi * sr)) / sr
    fig = Figure(figsize=(9, 5), layout="constrained")
    ax_audio, ax_stages = fig.subplots(2, 1, sharex=True, height_ratios=[1, 1.4])
    for ch, label in ((0, "user"), (1, "agent")):
        ax_audio.plot(t, stereo[round(lo * sr) : round(hi * sr), ch] + (1 - 2 * ch) * 0.5, lw=0.4, label=label)
    for ax in (ax_audio, ax_stages):
        ax.axvline(end, color="k", lw=1)
        ax.axvline(end + lat, color="r", lw=1)
    marks = (row.get("budget") or {}).get("marks") or {}
    if marks:  # the session's own clock readings, anchored where its VAD heard the speech end
        anchor = row.get("session_speech_end_s")
        anchor = end if anchor is None else anchor
        zero = marks.get("speech_end", min(marks.values()))
        for k, (name, v) in enumerate(sorted(marks.items(), key=lambda kv: kv[1])):
            x = anchor + v - zero
            if not lo <= x <= hi:  # a mark left over from an earlier turn (seen: -17.6 s)
                continue
            ax_audio.axvline(x, color="tab:green", lw=0.8, ls=":")
            ax_audio.text(x, 0.95 - 0.12 * (k % 4), f" {name}", fontsize=7, color="tab:green",
                          transform=ax_audio.get_xaxis_transform())
    ax_audio.set_title(f"{row['name']}: perceived {row['perceived_ms']:.0f} ms (black: last word, red: first audio)")
    ax_audio.set_yticks([0.5, -0.5], ["user", "agent"])
    stages = [s for s in (row.get("budget") or {}).get("stages", []) if s.get("ms") is not None and s["ms"] >= 0]
    x = end
    for i, s in enumerate(stages):
        ms, allot = s["ms"] / 1000.0, (s.get("allotment_ms") or 0.0) / 1000.0
        ax_stages.barh(i, allot, left=x, color="0.85", edgecolor="0.6")
        ax_stages.barh(i, ms, left=x, height=0.5, color="tab:red" if s.get("overrun") else "tab:blue")
        ax_stages.text(x + max(ms, allot) + 0.01, i, f"{s['ms']:.0f} / {s.get('allotment_ms') or 0:.0f} ms",
                       va="center", fontsize=8)
        x += ms
    ax_stages.set_yticks(range(len(stages)), [s["name"] for s in stages])
    ax_stages.invert_yaxis()
    if not stages:
        ax_stages.text(end, 0, "  (no budget event from the session)", va="center")
    ax_stages.set_xlabel("seconds on the clip's timeline (bars: stage time; grey: its allotment)")
    fig.savefig(path, dpi=100)
    return path


def write_plots(out: Path, results: dict[str, list[dict]]) -> dict[str, str]:
    """-> {plot: file name in out}. The waterfall needs the first configuration's NAME.wav."""
    plots = {"latency histogram": histogram(out / "latency_histogram.png", results).name}
    row = _typical(next(iter(results.values())))
    if row is not None and (out / f"{row['name']}.wav").exists():
        plots["waterfall of a typical turn"] = waterfall(out / "waterfall.png", row, out / f"{row['name']}.wav").name
    return plots

