"""Fixtures of the model's tests: the real model's checkpoint and the integer reference's
answers, each made once per session."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from nexos.machine.build import default_model, prebuild_shared
from nexos.model.reference import GenerationResult, generate
from nexos.model.tokenizer import smollm2_missing
from support import REPO, SMOLLM2_GGUF, file_lock, shared_once


@pytest.fixture(scope="session")
def smollm2_checkpoint() -> Path:
    """The real model as `nexos model import --gguf` writes it (tokenizer included): the
    checkpoint make puts on the LLM image (build/models/), made once for every worker."""
    assert SMOLLM2_GGUF is not None, smollm2_missing()
    with file_lock("shared"):
        shared = prebuild_shared(REPO, True)
    assert shared is None or shared.ok, shared.excerpt
    model = default_model(REPO)
    assert model is not None and model.is_file(), model
    return model


@pytest.fixture(scope="session")
def reference_generate(tmp_path_factory: pytest.TempPathFactory
                       ) -> Callable[..., GenerationResult]:
    """reference.generate(model, prompt, gen_len, **options), computed once per session
    for each distinct call (the model file named by path, size and time)."""
    def gen(model: Path, prompt: list[int], gen_len: int, **options: object
            ) -> GenerationResult:
        st = Path(model).stat()
        what = repr((str(model), st.st_size, st.st_mtime_ns, list(prompt), gen_len,
                     sorted(options.items())))
        key = hashlib.sha256(what.encode()).hexdigest()[:20]
        return shared_once(tmp_path_factory, f"generate-{key}",
                           lambda: generate(model, prompt, gen_len, **options))
    return gen
