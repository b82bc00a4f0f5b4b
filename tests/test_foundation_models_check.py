import json
import subprocess
import sys

import pytest

from parley.assets import MODELS


@pytest.mark.integration
@pytest.mark.slow
def test_models_check_loads_and_runs_every_embedded_model():
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "models", "--check", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["key"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == set(MODELS)
    for key, r in rows.items():
        assert r["check"] == "ok", (key, r["detail"])
    assert "fox" in rows["whisper-tiny.en"]["detail"].lower()
    assert "tokens" in rows["smollm2-135m-instruct"]["detail"]
