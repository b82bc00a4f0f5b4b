import dataclasses

import pytest

from parley import assets
from parley.assets import MODELS, EmbeddedModel, ModelFile, get_model
from parley.errors import ModelCorruptError, ModelError, ModelNotFoundError
from pipeline import model_check
from pipeline.cli import main
from pipeline.commands import models as models_command

pytestmark = pytest.mark.unit


def fake_dist(root, name, files):
    """An installed distribution on sys.path, as pip would leave it."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


@pytest.fixture
def fake_vad(tmp_path, monkeypatch):
    fake_dist(tmp_path, "parley-fake-vad", {"fake_vad/vad.onnx": b"x" * 100})
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def model(size=100, dist="parley-fake-vad", rel="fake_vad/vad.onnx"):
    return EmbeddedModel("fake-vad", "turn_detection", "Fake", dist, "1.0", "MIT", (ModelFile(rel, size),))


def test_every_default_model_resolves_to_an_existing_path():
    for key, m in MODELS.items():
        p = m.path()
        assert p.exists(), key
        assert m.stage in {"stt", "tts", "llm", "turn_detection"}
    assert get_model("whisper-tiny.en").path().joinpath("model.bin").is_file()


def test_resolves_an_installed_file(fake_vad):
    assert model().path() == fake_vad / "fake_vad" / "vad.onnx"


def test_missing_package_names_the_package_and_the_fix(fake_vad):
    with pytest.raises(ModelNotFoundError) as e:
        model(dist="parley-not-installed").path()
    assert "parley-not-installed" in str(e.value) and "pip install" in e.value.fix
    assert e.value.retryable is False


def test_missing_file_in_installed_package(fake_vad):
    with pytest.raises(ModelNotFoundError, match="missing"):
        model(rel="fake_vad/other.onnx").path()


def test_truncated_file_is_reported_as_corrupt(fake_vad):
    with pytest.raises(ModelCorruptError, match="has 100 bytes, expected 5000"):
        model(size=5000).path()


def test_unknown_key():
    with pytest.raises(KeyError, match="known"):
        get_model("whisper-huge")


def test_split_model_is_assembled_once_atomically(tmp_path, monkeypatch):
    fake_dist(tmp_path, "parley-fake-a", {"a/model.bin.part1": b"A" * 10, "a/config.json": b"{}"})
    fake_dist(tmp_path, "parley-fake-b", {"b/model.bin.part2": b"B" * 7})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path / "cache"))
    m = EmbeddedModel("split", "stt", "Split", "parley-fake-a", "1.0", "MIT", (
        ModelFile("a/model.bin.part1", 10), ModelFile("b/model.bin.part2", 7, dist="parley-fake-b"),
        ModelFile("a/config.json", 2)), layout="assembled")
    out = m.path()
    assert (out / "model.bin").read_bytes() == b"A" * 10 + b"B" * 7
    assert (out / "config.json").read_bytes() == b"{}"
    mtime = (out / "model.bin").stat().st_mtime_ns
    assert m.path() == out and (out / "model.bin").stat().st_mtime_ns == mtime  # not rebuilt
    assert not [p for p in out.iterdir() if p.name.startswith(".model.bin")]  # no temp left


def test_models_check_reports_a_broken_model_by_name_with_exit_2(fake_vad, monkeypatch, capsys):
    broken = dataclasses.replace(MODELS["silero-vad"], dist="parley-fake-vad",
                                 files=(ModelFile("fake_vad/vad.onnx", 999),))
    monkeypatch.setattr(assets, "MODELS", {"silero-vad": broken})
    monkeypatch.setattr(models_command, "MODELS", {"silero-vad": broken})
    monkeypatch.setattr(model_check, "MODELS", {"silero-vad": broken})
    assert main(["models", "--check"]) == 2
    out, err = capsys.readouterr()
    assert "FAILED" in out and "silero-vad" in err and "truncated" in err and "Traceback" not in err


def test_models_listing_shows_every_model(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for key, m in MODELS.items():
        assert key in out and m.licence in out


def test_model_error_message_carries_the_fix():
    e = ModelError("m", "gone", "pip install x")
    assert str(e) == "m: gone (fix: pip install x)"
