"""`parley models [--check] [--json]`: the embedded default models."""

from __future__ import annotations

import json
import sys

from parley.assets import MODELS
from parley.errors import ModelError


def _row(key: str) -> dict:
    m = MODELS[key]
    try:
        path, status = str(m.path()), "ok"
    except ModelError as e:
        path, status = "-", f"{type(e).__name__}: {e.cause} (fix: {e.fix})"
    return {"key": key, "stage": m.stage, "name": m.name, "package": " + ".join(m.dists),
            "version": m.version, "path": path, "size_mb": round(m.size / 1e6, 1),
            "licence": m.licence, "status": status}


def _table(rows: list[dict], cols: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip(), "  ".join("-" * widths[c] for c in cols)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)


def run(args) -> int:
    rows = [_row(k) for k in MODELS]
    if args.check:
        from pipeline.model_check import check_model

        for r in rows:
            res = check_model(r["key"])
            r["check"] = "ok" if res.ok else "FAILED"
            r["seconds"] = round(res.seconds, 2)
            r["detail"] = res.detail
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        cols = ["stage", "key", "package", "size_mb", "licence", "path"]
        if args.check:
            cols = ["stage", "key", "package", "size_mb", "licence", "check", "seconds", "detail"]
        print(_table(rows, cols))
    failed = [r for r in rows if (r.get("check") == "FAILED" if args.check else r["status"] != "ok")]
    for r in failed:
        print(f"error: {r['key']}: {r.get('detail') or r['status']}", file=sys.stderr)
    return 2 if failed else 0


def register(sub) -> None:
    p = sub.add_parser("models", help="list the embedded default models")
    p.add_argument("--check", action="store_true", help="load and run each model once; exit 2 on failure")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)
