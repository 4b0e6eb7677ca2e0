"""Cluster back end: checkpoints served by SGLang, scored through lm-eval's OpenAI-completions client.

- `launch_command(server, checkpoint)`: the SGLang launch command, generated from the config's
  eval.server section; with `--enable-deterministic-inference` unless eval.server.deterministic is
  false (`with_determinism`: SGLang samples a request by its seed only in that mode, so only then does
  a rescore give the same scores; the eval key records the setting).
- `SeededCompletionsLM` (the `server` back end, eval/__init__.py): lm-eval's `local-completions`
  with a DIFFERENT seed for every sample. Stock local-completions sends one fixed seed with every
  request, so the k repeats of a problem against a seed-honouring server would be identical
  and avg@k would silently become avg@1.
- `load_checkpoint(server, checkpoint)`: swap the served weights (SGLang /update_weights_from_disk),
  so one server scores every checkpoint of a run.
- `serve(server, checkpoint)`: start that server, wait until /health answers, stop it on exit
  (used by eval.score when eval.server.launch is true; otherwise the server is already running).
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shlex
import subprocess
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import numpy as np
import requests
from lm_eval.models.openai_completions import LocalCompletionsAPI
from tenacity import retry, stop_after_attempt, wait_exponential

from harness.hf_save import hf_checkpoint_problem
from harness.images import check_command_prefix

# Errors that mean "the server did not answer" (sync path: requests; concurrent path: aiohttp).
NETWORK_ERRORS = (requests.exceptions.RequestException, aiohttp.ClientError, asyncio.TimeoutError)


class ServerError(RuntimeError):
    """The evaluation server could not be reached or refused a request."""


def base_url(server: dict) -> str:
    url = server.get("url")
    if not url:
        raise ValueError("eval.server.url is required for backend 'server'")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"eval.server.url must look like http://host:port, got {url!r}")
    return url.rstrip("/").removesuffix("/v1/completions").removesuffix("/v1")


def with_determinism(server: dict) -> dict:
    """eval.server with ``deterministic`` spelled out (default true), so the eval key holds it.

    SGLang uses a request's seed only when it runs with --enable-deterministic-inference; otherwise
    the batch a request lands in decides its samples, and a rescore of the same checkpoint gives other
    numbers. A launched server gets the flag; a server started elsewhere (launch: false) must have
    been started with it, or the config says ``deterministic: false`` and the scores are keyed as not
    reproducible."""
    value = server.get("deterministic", True)
    if not isinstance(value, bool):
        raise ValueError(f"eval.server.deterministic must be true or false, got {value!r}")
    return {**server, "deterministic": value}


def launch_command(server: dict, checkpoint: str) -> list[str]:
    """`python -m sglang.launch_server ...` serving `checkpoint` at eval.server.url.

    Keys of eval.server: url, model (served name), tp (tensor parallel, default 1),
    mem_fraction (optional), random_seed (optional), deterministic (default true: see
    with_determinism), extra_args (list of further flags), command_prefix (words put before it,
    e.g. `apptainer exec --nv <image>` so that SGLang runs inside the slime container on a cluster).
    """
    parts = urlsplit(base_url(server))
    command = [str(word) for word in server.get("command_prefix", [])]
    command += ["python3", "-m", "sglang.launch_server",
               "--model-path", str(checkpoint),
               "--served-model-name", str(server.get("model") or "policy"),
               "--host", parts.hostname, "--port", str(parts.port or 80),
               "--tp-size", str(int(server.get("tp", 1)))]
    if server.get("mem_fraction") is not None:
        command += ["--mem-fraction-static", str(float(server["mem_fraction"]))]
    if server.get("random_seed") is not None:
        command += ["--random-seed", str(int(server["random_seed"]))]
    if with_determinism(server)["deterministic"]:
        command += ["--enable-deterministic-inference"]
    return command + [str(arg) for arg in server.get("extra_args", [])]


@contextmanager
def serve(server: dict, checkpoint: str):
    """Run `launch_command(server, checkpoint)` for the duration of the block.

    Waits up to eval.server.ready_timeout seconds (default 900) for GET /health to answer 200;
    a server that exits early or never gets ready raises ServerError naming the URL."""
    # the image the server runs in, before it starts: the placeholder registry or a missing .sif named
    check_command_prefix(server.get("command_prefix", []), "eval.server.command_prefix")
    command = launch_command(server, checkpoint)
    url = base_url(server) + "/health"
    timeout = float(server.get("ready_timeout", 900))
    process = subprocess.Popen(command)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise ServerError(f"evaluation server for {url} exited with code {process.returncode} "
                                  f"before it was ready: {shlex.join(command)}")
            try:
                if requests.get(url, timeout=5).ok:
                    break
            except NETWORK_ERRORS:
                pass
            if time.monotonic() > deadline:
                raise ServerError(f"evaluation server not ready at {url} after {timeout:.0f} s: "
                                  f"{shlex.join(command)}")
            time.sleep(0.5)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def load_checkpoint(server: dict, checkpoint: str, *, attempts: int = 3, timeout: float = 600.0) -> None:
    """Ask the running SGLang server to serve `checkpoint` (POST /update_weights_from_disk).

    Retries `attempts` times with a growing pause (1, 2, 4... s), then raises naming the URL."""
    url = base_url(server) + "/update_weights_from_disk"
    for attempt in range(1, attempts + 1):
        try:
            response = requests.post(url, json={"model_path": str(checkpoint)}, timeout=timeout)
            break
        except NETWORK_ERRORS as error:
            if attempt == attempts:
                raise ServerError(f"evaluation server unreachable at {url} after {attempts} "
                                  f"attempts: {error!r}") from error
            time.sleep(2 ** (attempt - 1))
    if not response.ok or response.json().get("success") is False:
        raise ServerError(f"{url} refused to load {checkpoint}: HTTP {response.status_code} {response.text[:300]}")


def sample_seed(seed: int, doc_id: int, repeat: int) -> int:
    """The seed of sample `repeat` of problem `doc_id`: distinct per sample, fixed by the config seed."""
    return int(np.random.SeedSequence([seed, doc_id, repeat]).generate_state(1)[0])


class SeededCompletionsLM(LocalCompletionsAPI):
    """local-completions, one seed per sample; a dead server raises ServerError naming its URL."""

    @classmethod
    def check_settings(cls, settings: dict) -> None:
        """Also spells out eval.server.deterministic in ``settings``, so that the eval key records
        whether the scores are reproducible (with_determinism)."""
        base_url(settings.get("server") or {})
        settings["server"] = with_determinism(settings.get("server") or {})

    @classmethod
    def checkpoint_problem(cls, checkpoint: Path) -> str | None:
        if not (checkpoint / "config.json").is_file():
            return f"{checkpoint / 'config.json'} is missing"
        return hf_checkpoint_problem(checkpoint)  # an interrupted HF save is never scored

    @classmethod
    @contextmanager
    def models(cls, settings: dict, checkpoints: list[Path]):
        """One client for every checkpoint, the served weights swapped to each in turn; with
        eval.server.launch, a server started here (on the first checkpoint) for the block."""
        server = settings["server"]
        with serve(server, str(checkpoints[0])) if server.get("launch") else contextlib.nullcontext():
            lm = cls(base_url=base_url(server) + "/v1/completions", model=server.get("model") or "policy",
                     seed=settings["seed"], num_concurrent=int(server.get("concurrency", 1)),
                     max_retries=int(server.get("max_retries", 3)), timeout=int(server.get("timeout", 3600)))

            def model_for(checkpoint: Path):
                if server.get("swap_weights", True):
                    load_checkpoint(server, str(checkpoint), attempts=int(server.get("max_retries", 3)))
                return lm

            yield model_for

    def __init__(self, base_url=None, tokenizer_backend="none", tokenized_requests=False, **kwargs):
        super().__init__(base_url=base_url, tokenizer_backend=tokenizer_backend,
                         tokenized_requests=tokenized_requests, **kwargs)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        # lm-eval passes the k repeats of a problem as the same Instance k times in a row.
        repeat_of: Counter = Counter()
        seeded = []
        for request in requests:
            repeat = repeat_of[id(request)]
            repeat_of[id(request)] += 1
            context, gen_kwargs = request.args[:2]
            # A seed inside gen_kwargs overrides the fixed one in the request payload.
            gen_kwargs = {**gen_kwargs, "seed": sample_seed(self._seed, request.doc_id, repeat)}
            seeded.append(dataclasses.replace(request, arguments=(context, gen_kwargs, *request.args[2:])))
        try:
            if self._concurrent <= 1:
                return super().generate_until(seeded, disable_tqdm=disable_tqdm)
            return asyncio.run(self._generate_concurrently([request.args[:2] for request in seeded]))
        except NETWORK_ERRORS as error:
            raise ServerError(f"evaluation server unreachable or failing at {self.base_url} after "
                              f"{self.max_retries} attempts: {error!r}") from error

    async def _generate_concurrently(self, requests: list[tuple[str, dict]]) -> list[str]:
        """Every (context, gen_kwargs) request at once, ``concurrency`` in flight, through lm-eval's own
        request coroutine (amodel_call) and retry rule. Stock lm-eval sends concurrently only requests
        with equal gen_kwargs (its Collator groups by them), and a seed per sample makes every group
        one request: concurrency would do nothing."""
        connector = aiohttp.TCPConnector(limit=self._concurrent, ssl=self.verify_certificate)
        slots = asyncio.Semaphore(self._concurrent)
        call = retry(stop=stop_after_attempt(self.max_retries), wait=wait_exponential(multiplier=0.5, min=1, max=10),
                     reraise=True)(self.amodel_call)
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=self.timeout)) as session:
            answers = await asyncio.gather(*(
                call(session=session, sem=slots, messages=[context], cache_keys=[(context, gen_kwargs)],
                     generate=True, gen_kwargs=gen_kwargs) for context, gen_kwargs in requests))
        return [answer for (answer,) in answers]
